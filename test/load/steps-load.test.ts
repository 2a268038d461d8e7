/**
 * A service raised to several sequences, under a chat service's mixed load: native streams of
 * random lengths arriving at random moments, a quarter of them cancelled, beside OpenAI- and
 * Anthropic-API clients resending growing histories (and structured, tool, Responses, Ollama,
 * retrieval and legacy-completions clients, the retrieval models loaded beside the chat model; with
 * the compiled natives, picture clients of the vision preset too, whose pictures' chunks meet the
 * native steps, their aborts and the cancels). Turns arrive while replies step natively, so the steps are
 * aborted at every moment of a batch (the pieces of a batch of non-consecutive sequence ids
 * included), and every request must still end cleanly with nothing logged at error level.
 * Runs on bench-small with the compiled natives where they are built (always under CI).
 */
import { afterEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { allowSlowTests, type ChildServer, compiledNatives, presetModel, runChatMix, seedKeys, startServer, tempDir, withSeed } from "../support";
import { visionPair } from "../support/vision";

allowSlowTests();

const natives = await compiledNatives();
console.log(`steps-load: ${natives === undefined ? "npm prebuilt natives (no native steps)" : `compiled natives ${natives}`}`);

const DURATION_MS = 25_000;

let server: ChildServer | undefined;
afterEach(async () => {
  await server?.stop();
  server = undefined;
});

describe("mixed load on several sequences", () => {
  for (const parallel of [3, 4, 8]) {
    test(
      `PARLEY_PARALLEL=${parallel}: every request ends cleanly, nothing logged at error level`,
      withSeed(async (random) => {
        const dbPath = join(tempDir(`steps-load-${parallel}`), "parley.db");
        const keys = await seedKeys(dbPath, 10);
        // The retrieval models beside bench-small, all three loaded at once.
        const models = [await presetModel("bench-small"), await presetModel("embed"), await presetModel("rerank")];
        // Its projector beside it: only the compiled natives see pictures.
        const vision = natives === undefined ? undefined : (await visionPair()).model;
        if (vision) models.push(vision);
        server = await startServer({
          dbPath,
          adminKey: keys.admin,
          env: {
            PARLEY_MODEL: models.join(","),
            PARLEY_MAX_LOADED_MODELS: String(models.length),
            PARLEY_PARALLEL: String(parallel),
            PARLEY_CONTEXT_SIZE: "1024",
            PARLEY_THREADS: "2",
            PARLEY_RATE_LIMIT: "0",
            // Heartbeats in every wait of a second, so each protocol's clients meet them under load.
            PARLEY_HEARTBEAT_MS: "1000",
          },
        });
        const result = await runChatMix({
          url: server.url,
          keys: keys.users,
          nativeClients: 6,
          openaiClients: 4,
          logprobsClients: 1,
          structuredClients: 2,
          toolClients: 2,
          responsesClients: 2,
          anthropicClients: 2,
          ollamaClients: 2,
          retrievalClients: 1,
          completionClients: 1,
          ...(vision ? { pictureClients: 2, pictureModel: "parley-vision" } : {}),
          durationMs: DURATION_MS,
          deadlineMs: 30_000,
          random,
        });
        console.log(
          `steps-load parallel ${parallel}: ${result.requests} requests ${JSON.stringify(result.ok)}, ${result.failures.length} failed; cached tokens on /v1: ${result.cachedTokens}`,
        );
        expect({ failures: result.failures.slice(0, 5), errorLines: server.errorLines.slice(0, 5) }).toEqual({ failures: [], errorLines: [] });
        // The load must have run every kind of request, and the OpenAI clients' prefixes been reused.
        for (const kind of [
          "native stream",
          "native cancelled",
          "openai stream",
          "openai reply",
          "openai logprobs",
          "anthropic stream",
          "anthropic reply",
          "ollama stream",
          "ollama reply",
          "embeddings",
          "rerank",
          "ollama embed",
          "completions reply",
          "completions stream",
        ])
          expect(result.ok[kind] ?? 0).toBeGreaterThan(0);
        if (vision) for (const kind of ["pictures stream", "pictures cancelled"]) expect(result.ok[kind] ?? 0).toBeGreaterThan(0);
        expect((result.ok.structured ?? 0) + (result.ok["structured cut"] ?? 0)).toBeGreaterThan(0);
        expect(result.ok["tool call"] ?? 0).toBeGreaterThan(0);
        expect(Object.keys(result.ok).filter((kind) => kind.startsWith("responses")).length).toBeGreaterThan(2);
        expect(result.cachedTokens).toBeGreaterThan(0);
        expect(await server.stop()).toBe(0);
      }),
      60_000,
    );
  }
});
