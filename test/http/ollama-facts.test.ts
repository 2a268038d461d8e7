/**
 * What Ollama's routes report is measured, not made up: the durations of every reply (streamed or
 * not) and of embeddings, a load's among them; `/api/ps`'s `expires_at` from the model's
 * keep-alive; `/api/show`'s `model_info` from the file's header and its `capabilities`. Through the
 * `ollama` client, on several models served as `parley serve` serves them.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { Ollama } from "ollama";
import { DEMO_MODEL_NAME } from "../../src/gguf/presets";
import { allowSlowTests, presetModel, type ServedModelsApp, serveModels, testDb } from "../support";

allowSlowTests();

const EMBED = "parley-embed";
/** The operator's keep-alive here: a client's longer one is held to it. */
const KEEP_ALIVE_S = 120;

const db = testDb("ollama-facts");
let service: ServedModelsApp;
let client: Ollama;
let thinker: string;

beforeAll(async () => {
  const { key } = await db.keys.create("alice", "user");
  service = await serveModels({
    storage: db.storage,
    paths: [await presetModel("demo"), await presetModel("embed"), await presetModel("qwen3-thinking")],
    max: 3,
    keepAliveMs: KEEP_ALIVE_S * 1000,
  });
  client = new Ollama({ host: service.served.url, headers: { Authorization: `Bearer ${key}` } });
  thinker = (await client.list()).models.find((model) => ![`${EMBED}:latest`, `${DEMO_MODEL_NAME}:latest`].includes(model.name))!.name;
});
afterAll(async () => {
  await service.stop();
  await db.storage.close();
});

const ask = [{ role: "user", content: "Hello there!" }];
const options = { temperature: 0, seed: 1, num_predict: 12 };

interface Times {
  total_duration: number;
  load_duration: number;
  prompt_eval_duration: number;
  eval_duration: number;
}

/** Each part measured, none more than the whole. */
function expectMeasured(times: Times) {
  expect(times.prompt_eval_duration).toBeGreaterThan(0);
  expect(times.eval_duration).toBeGreaterThan(0);
  expect(times.load_duration + times.prompt_eval_duration + times.eval_duration).toBeLessThanOrEqual(times.total_duration);
}

test("a reply's durations are measured, streamed or not; the first request to a model also waited for its load", async () => {
  const first = await client.chat({ model: DEMO_MODEL_NAME, messages: ask, stream: false, options });
  expectMeasured(first);
  const again = await client.chat({ model: DEMO_MODEL_NAME, messages: ask, stream: false, options });
  expectMeasured(again);
  expect(first.load_duration).toBeGreaterThan(again.load_duration);
  let last: Times | undefined;
  for await (const part of await client.generate({ model: DEMO_MODEL_NAME, prompt: "Hello there!", stream: true, options })) if (part.done) last = part;
  expectMeasured(last!);
  expectMeasured(await client.generate({ model: DEMO_MODEL_NAME, prompt: "Hello there!", stream: false, options }));
});

test("embeddings: the first request's load is its load_duration", async () => {
  const first = await client.embed({ model: EMBED, input: ["a cat on a mat"] });
  const again = await client.embed({ model: EMBED, input: ["a cat on a mat"] });
  expect(first.load_duration).toBeGreaterThan(again.load_duration);
  expect(first.total_duration).toBeGreaterThanOrEqual(first.load_duration);
});

test("/api/ps: each loaded model expires its keep-alive after its last use, a client's within the operator's", async () => {
  await client.chat({ model: DEMO_MODEL_NAME, messages: [], keep_alive: "30s" });
  await client.chat({ model: thinker, messages: [], keep_alive: "1h" });
  const now = Date.now();
  const expiry = Object.fromEntries((await client.ps()).models.map((model) => [model.name, new Date(model.expires_at).getTime() - now]));
  expect(expiry[`${DEMO_MODEL_NAME}:latest`]).toBeGreaterThan(20_000);
  expect(expiry[`${DEMO_MODEL_NAME}:latest`]).toBeLessThanOrEqual(30_000);
  expect(expiry[thinker]).toBeGreaterThan((KEEP_ALIVE_S - 10) * 1000);
  expect(expiry[thinker]).toBeLessThanOrEqual(KEEP_ALIVE_S * 1000);
  expect(expiry[`${EMBED}:latest`]).toBeGreaterThan(0);
});

test("/api/show: model_info is the file's header, as Ollama shows it; capabilities say what the model does", async () => {
  const shown = await client.show({ model: DEMO_MODEL_NAME });
  const info = shown.model_info as unknown as Record<string, unknown>;
  const architecture = info["general.architecture"] as string;
  expect(architecture).toBe(shown.details.family);
  for (const key of ["context_length", "embedding_length", "block_count"]) expect(info[`${architecture}.${key}`]).toBeGreaterThan(0);
  expect(info["general.name"]).toBe(DEMO_MODEL_NAME);
  expect(info["general.parameter_count"]).toBeGreaterThan(0);
  expect(info["tokenizer.ggml.model"]).toBe("llama");
  expect(info["tokenizer.ggml.tokens"]).toBeUndefined();
  expect(info["tokenizer.chat_template"]).toBeUndefined();
  expect(shown.capabilities).toEqual(["completion", "tools"]);
  expect((await client.show({ model: EMBED })).capabilities).toEqual(["embedding"]);
  expect((await client.show({ model: thinker })).capabilities).toEqual(["completion", "tools", "thinking"]);
});
