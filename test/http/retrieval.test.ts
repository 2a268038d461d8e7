/**
 * Embeddings and reranking beside a chat model, through the official clients (the openai SDK, the
 * `ollama` package): the vectors and scores are llama-server's for the same files (its answers
 * kept in test/fixtures by tools/retrieval-fixture.ts), each model refuses what it is not for,
 * inputs are checked, and their tokens count to the user.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { TokenLedger } from "../../src/chat/token-ledger";
import {
  allowSlowTests,
  EMBED_INPUTS,
  fileSha256,
  presetModel,
  RERANK_DOCUMENTS,
  RERANK_QUERY,
  type RetrievalFixture,
  readFixture,
  type ServedModelsApp,
  servedDocument,
  serveModels,
  testDb,
  until,
} from "../support";

allowSlowTests();

const EMBED = "parley-embed";
const RERANK = "parley-rerank";
/** llama-server batches its inputs otherwise than Parley, and float sums depend on the order. */
const VECTOR_TOLERANCE = 1e-3;
const SCORE_TOLERANCE = 3e-3;

const db = testDb("retrieval-http");
let service: ServedModelsApp;
let key: string;
let userId: number;
let openai: OpenAI;
let ollama: Ollama;
let fixture: RetrievalFixture;

const dot = (a: ArrayLike<number>, b: ArrayLike<number>) => Array.from(a).reduce((sum, x, i) => sum + x * b[i]!, 0);
const cosine = (a: ArrayLike<number>, b: ArrayLike<number>) => dot(a, b) / Math.sqrt(dot(a, a) * dot(b, b));
const maxDifference = (a: ArrayLike<number>, b: ArrayLike<number>) => Math.max(...Array.from(a, (x, i) => Math.abs(x - b[i]!)));

const post = (path: string, body: unknown) =>
  fetch(`${service.served.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });

async function refusal(path: string, body: unknown): Promise<{ status: number; param: string | null; message: string }> {
  const response = await post(path, body);
  const { error } = (await response.json()) as { error: { param: string | null; message: string } | string };
  return typeof error === "string" ? { status: response.status, param: null, message: error } : { status: response.status, ...error };
}

beforeAll(async () => {
  const created = await db.keys.create("alice", "user");
  ({ key, userId } = created);
  const [demo, embed, rerank] = [await presetModel("demo"), await presetModel("embed"), await presetModel("rerank")];
  fixture = await readFixture();
  expect({ embed: await fileSha256(embed), rerank: await fileSha256(rerank) }).toEqual({ embed: fixture.embed.sha256, rerank: fixture.rerank.sha256 });
  service = await serveModels({
    storage: db.storage,
    paths: [demo, embed, rerank],
    max: 3,
    keepAliveMs: -1,
    ledger: new TokenLedger(db.storage.usage, db.storage.quotas),
  });
  openai = new OpenAI({ apiKey: key, baseURL: `${service.served.url}/v1`, maxRetries: 0 });
  ollama = new Ollama({ host: service.served.url, headers: { Authorization: `Bearer ${key}` } });
});
afterAll(async () => {
  await service.stop();
  await db.storage.close();
});

describe("embeddings", () => {
  test("are llama-server's for the same file, through the openai SDK (base64) and as floats", async () => {
    const viaSdk = await openai.embeddings.create({ model: EMBED, input: EMBED_INPUTS });
    const floats = (await (
      await post("/v1/embeddings", { model: EMBED, input: EMBED_INPUTS, encoding_format: "float" })
    ).json()) as OpenAI.CreateEmbeddingResponse;
    expect(viaSdk.model).toBe(EMBED);
    expect(viaSdk.data.map((item) => item.index)).toEqual(EMBED_INPUTS.map((_, i) => i));
    for (const [i, expected] of fixture.embed.vectors.entries()) {
      const [sdk, float] = [viaSdk.data[i]!.embedding, floats.data[i]!.embedding];
      expect(sdk.length).toBe(expected.length);
      expect(maxDifference(sdk, float)).toBeLessThan(1e-6);
      expect(cosine(sdk, expected)).toBeGreaterThan(0.9999);
      expect(maxDifference(sdk, expected)).toBeLessThan(VECTOR_TOLERANCE);
      expect(Math.abs(dot(sdk, sdk) - 1)).toBeLessThan(1e-5);
      // Each input's own: the model tells these inputs apart, so a vector of another input would fail.
      for (const [j, other] of fixture.embed.vectors.entries()) if (j !== i) expect(cosine(sdk, other)).toBeLessThan(0.99);
    }
    expect(viaSdk.usage.prompt_tokens).toBeGreaterThan(EMBED_INPUTS.length);
    expect(viaSdk.usage.total_tokens).toBe(viaSdk.usage.prompt_tokens);
  });

  test("token arrays are embedded as the texts they spell; a request naming no model gets the first embedding model", async () => {
    const tokens = (await (
      await fetch(`${service.served.url}/v1/embeddings`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ input: [[965, 293, 116], [965]] }),
      })
    ).json()) as OpenAI.CreateEmbeddingResponse;
    expect(tokens.model).toBe(EMBED);
    expect(tokens.data).toHaveLength(2);
    expect(cosine(tokens.data[0]!.embedding, tokens.data[1]!.embedding)).toBeLessThan(0.99);
  });

  test("through the ollama package: embed (normalized, as /v1/embeddings) and the older embeddings (as pooled)", async () => {
    const embedded = await ollama.embed({ model: EMBED, input: EMBED_INPUTS.slice(0, 2) });
    expect(embedded.model).toBe(EMBED);
    expect(embedded.prompt_eval_count).toBeGreaterThan(2);
    for (const [i, vector] of embedded.embeddings.entries()) expect(maxDifference(vector, fixture.embed.vectors[i]!)).toBeLessThan(VECTOR_TOLERANCE);
    const { embedding } = await ollama.embeddings({ model: EMBED, prompt: EMBED_INPUTS[0]! });
    const norm = Math.sqrt(dot(embedding, embedding));
    expect(Math.abs(norm - 1)).toBeGreaterThan(0.01);
    expect(
      maxDifference(
        embedding.map((x) => x / norm),
        fixture.embed.vectors[0]!,
      ),
    ).toBeLessThan(VECTOR_TOLERANCE);
  });

  test("no input is no vector, and the model serves on (the fuzz found the loop stuck after one)", async () => {
    expect((await ollama.embed({ model: EMBED, input: [] })).embeddings).toEqual([]);
    expect((await ollama.embed({ model: EMBED, input: ["after"] })).embeddings).toHaveLength(1);
  });

  test('as on Ollama\'s server, an empty input ("" or []) only loads the model; an empty text among others is refused naming it', async () => {
    const loaded = async () => (await ollama.ps()).models.map((model) => model.name);
    expect(await ollama.embed({ model: EMBED, input: "", keep_alive: 0 })).toMatchObject({ model: EMBED, embeddings: [] });
    await until(async () => !(await loaded()).includes(`${EMBED}:latest`), "the embedding model to be unloaded");
    expect((await ollama.embed({ model: EMBED, input: "" })).embeddings).toEqual([]);
    expect(await loaded()).toContain(`${EMBED}:latest`);
    expect((await ollama.embeddings({ model: EMBED, prompt: "" })).embedding).toEqual([]);
    const refused = await refusal("/api/embed", { model: EMBED, input: ["a", ""] });
    expect(refused).toMatchObject({ status: 400 });
    expect(refused.message).toStartWith("input[1]: ");
  });

  test("Ollama's keep_alive: 0 unloads the model once idle, as Ollama's does; the next request loads it again; a bad duration is refused", async () => {
    const loaded = async () => (await ollama.ps()).models.map((model) => model.name);
    await ollama.embed({ model: EMBED, input: "load it" });
    expect(await loaded()).toContain(`${EMBED}:latest`);
    await ollama.embed({ model: EMBED, input: "then let it go", keep_alive: 0 });
    await until(async () => !(await loaded()).includes(`${EMBED}:latest`), "the embedding model to be unloaded");
    expect((await ollama.embed({ model: EMBED, input: "back", keep_alive: "5m" })).embeddings).toHaveLength(1);
    expect(await loaded()).toContain(`${EMBED}:latest`);
    expect(await refusal("/api/embed", { model: EMBED, input: "x", keep_alive: "5 minutes" })).toMatchObject({ status: 400 });
  });

  test("an input past the model's context: 400 naming it, or cut when Ollama's truncate asks (its default)", async () => {
    const long = "word ".repeat(3000);
    expect(await refusal("/v1/embeddings", { model: EMBED, input: ["short", long] })).toMatchObject({ status: 400, param: "input[1]" });
    expect(await refusal("/api/embed", { model: EMBED, input: ["short", long], truncate: false })).toMatchObject({ status: 400 });
    const cut = await ollama.embed({ model: EMBED, input: long });
    expect(cut.prompt_eval_count).toBe(1024);
  });

  test("refused by name: another model's purpose, dimensions it does not have, tokens it lacks, an unknown field", async () => {
    expect(await refusal("/v1/embeddings", { model: RERANK, input: "x" })).toMatchObject({ status: 400, param: "model" });
    expect(await refusal("/v1/embeddings", { model: "parley-demo", input: "x" })).toMatchObject({ status: 400, param: "model" });
    expect(await refusal("/v1/embeddings", { model: EMBED, input: "x", dimensions: 64 })).toMatchObject({ status: 400, param: "dimensions" });
    expect((await openai.embeddings.create({ model: EMBED, input: "x", dimensions: 256 })).data[0]!.embedding).toHaveLength(256);
    expect(await refusal("/v1/embeddings", { model: EMBED, input: [[1, 2, 999_999]] })).toMatchObject({ status: 400, param: "input[0]" });
    expect(await refusal("/v1/embeddings", { model: EMBED, input: "x", truncate: true })).toMatchObject({ param: "truncate" });
    expect((await refusal("/v1/embeddings", { model: EMBED, input: "" })).status).toBe(400);
    expect(await refusal("/api/chat", { model: EMBED, messages: [{ role: "user", content: "hi" }], stream: false })).toMatchObject({ status: 400 });
    const chat = await openai.chat.completions.create({ model: EMBED, messages: [{ role: "user", content: "hi" }] }).catch((error: unknown) => error);
    expect(chat).toBeInstanceOf(OpenAI.BadRequestError);
    expect((chat as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("model");
  });

  test("the tokens count to the user, under a quota too", async () => {
    const before = await db.storage.usage.days(userId, "2000-01-01");
    const { usage } = await openai.embeddings.create({ model: EMBED, input: ["one", "two"] });
    const after = await db.storage.usage.days(userId, "2000-01-01");
    const total = (days: typeof before) => days.reduce((sum, day) => sum + day.promptTokens, 0);
    expect(total(after) - total(before)).toBe(usage.prompt_tokens);
    await db.storage.quotas.set(userId, { tokens: total(after) + 3, period: "day" });
    try {
      const refused = await post("/v1/embeddings", { model: EMBED, input: "a longer input than the quota leaves room for" });
      expect(refused.status).toBe(429);
      const { error } = (await refused.json()) as { error: { code: string; message: string } };
      expect(error.code).toBe("insufficient_quota");
      expect(error.message).toMatch(/^this request needs \d+ tokens .* 3 of this user's token quota/);
    } finally {
      await db.storage.quotas.clear(userId);
    }
  });
});

test("answers and refusals match the served OpenAPI document", async () => {
  const spec = await servedDocument(service.served.url);
  const check = async (path: string, body: unknown) => {
    const response = await post(path, body);
    spec.expectDocumented(path, "post", response.status, await response.json());
    return response.status;
  };
  expect(await check("/v1/embeddings", { model: EMBED, input: ["one", "two"] })).toBe(200);
  expect(await check("/v1/embeddings", { model: EMBED, input: "one", encoding_format: "base64" })).toBe(200);
  expect(await check("/v1/embeddings", { model: RERANK, input: "one" })).toBe(400);
  expect(await check("/v1/rerank", { query: "q", documents: ["a", "b"], return_documents: true })).toBe(200);
  expect(await check("/rerank", { query: "q", documents: ["a"], top_n: 1 })).toBe(200);
  expect(await check("/api/embed", { model: EMBED, input: ["one"] })).toBe(200);
  expect(await check("/api/embeddings", { model: EMBED, prompt: "one" })).toBe(200);
  expect(await check("/api/embed", { model: EMBED, input: "x", options: { num_ctx: "8" } })).toBe(400);
});

test("GET /v1/models says what each model answers, as documented", async () => {
  const response = await fetch(`${service.served.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
  const body = (await response.json()) as { data: { id: string; purpose: string }[] };
  (await servedDocument(service.served.url)).expectDocumented("/v1/models", "get", response.status, body);
  expect(body.data.map(({ id, purpose }) => [id, purpose])).toEqual([
    ["parley-demo", "chat"],
    [EMBED, "embedding"],
    [RERANK, "ranking"],
  ]);
});

describe("reranking", () => {
  test("scores and orders the documents as llama-server does on the same file, at /v1/rerank and /rerank", async () => {
    for (const path of ["/v1/rerank", "/rerank"]) {
      const response = await post(path, { model: RERANK, query: RERANK_QUERY, documents: RERANK_DOCUMENTS });
      expect(response.status).toBe(200);
      const body = (await response.json()) as { model: string; results: { index: number; relevance_score: number }[]; usage: { prompt_tokens: number } };
      expect(body.model).toBe(RERANK);
      expect(body.results.map((result) => result.index)).toEqual(fixture.rerank.results.map((result) => result.index));
      for (const [i, expected] of fixture.rerank.results.entries())
        expect(Math.abs(body.results[i]!.relevance_score - expected.relevance_score)).toBeLessThan(SCORE_TOLERANCE);
      expect(body.usage.prompt_tokens).toBeGreaterThan(RERANK_DOCUMENTS.length * 50);
    }
  });

  test("top_n keeps the best; return_documents gives their texts; other purposes and bad documents are refused by name", async () => {
    const response = await post("/v1/rerank", { query: RERANK_QUERY, documents: RERANK_DOCUMENTS, top_n: 2, return_documents: true });
    const { results } = (await response.json()) as { results: { index: number; document: { text: string } }[] };
    expect(results.map((result) => result.index)).toEqual(fixture.rerank.results.slice(0, 2).map((result) => result.index));
    expect(results[0]!.document.text).toBe(RERANK_DOCUMENTS[results[0]!.index]!);
    expect(await refusal("/v1/rerank", { model: EMBED, query: "q", documents: ["d"] })).toMatchObject({ status: 400, param: "model" });
    expect(await refusal("/v1/rerank", { query: "q", documents: ["d", "word ".repeat(3000)] })).toMatchObject({ status: 400, param: "documents[1]" });
    expect((await refusal("/v1/rerank", { query: "q", documents: [] })).status).toBe(400);
  });
});
