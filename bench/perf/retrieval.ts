/**
 * B21 embeddings throughput and B22 rerank latency (issue #49): Parley serving the `embed` and
 * `rerank` presets beside the bench model, against llama-server on the same files with
 * `--embeddings` or `--rerank`, the same threads and as many sequences (slots), their rounds
 * alternating. B21 sends 64 inputs of about 100 tokens in one request (batching them into few
 * decodes is the lever); B22 ranks 16 documents against a query.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { writePresetModel } from "../../src/gguf/presets";
import type { RetrievalPreset } from "../../src/gguf/retrieval";
import { median } from "../../test/support/stats";
import { alternate, type Context, freshDb, parley, type Row, type Scenario } from "./harness";
import { ADMIN_KEY, startLlamaServer } from "./procs";
import { userMessage } from "./text";

/** Sequences on both sides: llama-server's slots, Parley's `PARLEY_PARALLEL`. */
const PARALLEL = 4;

async function presetFile(ctx: Context, preset: RetrievalPreset): Promise<string> {
  const path = join(ctx.cacheDir, `bench-${preset}.gguf`);
  if (!existsSync(path)) await writePresetModel(preset, path);
  return path;
}

interface Timed {
  ms: number;
  promptTokens: number;
}

async function timedPost(url: string, body: object): Promise<Timed> {
  const started = performance.now();
  const response = await fetch(url, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const answer = (await response.json()) as { usage?: { prompt_tokens: number } };
  const ms = performance.now() - started;
  if (!response.ok) throw new Error(`${url} answered ${response.status}: ${JSON.stringify(answer).slice(0, 300)}`);
  return { ms, promptTokens: answer.usage?.prompt_tokens ?? 0 };
}

/** Parley and llama-server on `preset`'s file, each warmed up once, then `rounds` alternating runs of `body` at `path`. */
async function compare(ctx: Context, preset: RetrievalPreset, flag: string, path: string, body: (run: number) => object, rounds: number) {
  const file = await presetFile(ctx, preset);
  const env = { PARLEY_MODEL: `${ctx.model},${file}`, PARLEY_MAX_LOADED_MODELS: "2", PARLEY_KEEP_ALIVE_S: "-1" };
  const contenders = [
    { name: "parley", start: parley(ctx, PARALLEL, freshDb(ctx), env) },
    ...(ctx.llamaServer
      ? [
          {
            name: "llamaServer",
            start: () =>
              startLlamaServer({ binary: ctx.llamaServer!, model: file, threads: ctx.threads, parallel: PARALLEL, contextSize: 1024, flags: [flag] }),
          },
        ]
      : []),
  ] as const;
  const model = `parley-${preset}`;
  const { runs } = await alternate(
    contenders,
    (contender) => contender.start,
    (_contender, server) => timedPost(`${server.url}${path}`, { model, ...body(-1) }),
    (_contender, url, run) => timedPost(`${url}${path}`, { model, ...body(run) }),
    rounds,
  );
  return runs as Partial<Record<"parley" | "llamaServer", Timed[]>>;
}

const INPUTS = 64;
const DOCUMENTS = 16;

export const retrieval: Scenario = {
  ids: ["B21", "B22"],
  async run(ctx: Context): Promise<Row[]> {
    const rounds = ctx.runs * 3;
    const inputs = (run: number) => Array.from({ length: INPUTS }, (_, i) => userMessage(60_000 + run * 100 + i, 49));
    const embedded = await compare(ctx, "embed", "--embeddings", "/v1/embeddings", (run) => ({ input: inputs(run) }), rounds);
    const query = (run: number) => userMessage(70_000 + run, 12);
    const documents = (run: number) => Array.from({ length: DOCUMENTS }, (_, i) => userMessage(80_000 + run * 100 + i, 30));
    const ranked = await compare(ctx, "rerank", "--rerank", "/v1/rerank", (run) => ({ query: query(run), documents: documents(run) }), rounds);
    const perSecond = (runs: Timed[] | undefined) => runs && median(runs.map((run) => (INPUTS * 1000) / run.ms));
    const latency = (runs: Timed[] | undefined) => runs && median(runs.map((run) => run.ms));
    const [mineEmbed, theirEmbed] = [perSecond(embedded.parley), perSecond(embedded.llamaServer)];
    const [mineRank, theirRank] = [latency(ranked.parley), latency(ranked.llamaServer)];
    const tokensPerInput = embedded.parley![0]!.promptTokens / INPUTS;
    return [
      {
        id: "B21",
        what: `embeddings inputs/s, ${INPUTS} inputs of ~100 tokens a request`,
        parley: mineEmbed,
        yardstick: theirEmbed,
        ratio: theirEmbed === undefined ? undefined : mineEmbed! / theirEmbed,
        target: [">=", 1.0],
        detail: { parley: embedded.parley, llamaServer: embedded.llamaServer, parallel: PARALLEL, tokensPerInput },
      },
      {
        id: "B22",
        what: `rerank ms, ${DOCUMENTS} documents a query (ratio: llama-server's ÷ Parley's)`,
        parley: mineRank,
        yardstick: theirRank,
        ratio: theirRank === undefined ? undefined : theirRank / mineRank!,
        target: [">=", 1.0],
        detail: { parley: ranked.parley, llamaServer: ranked.llamaServer, parallel: PARALLEL },
      },
    ];
  },
};
