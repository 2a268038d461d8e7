/**
 * Ollama's routes take what Ollama's server takes: fields and options it does not know are
 * ignored, and said (a `warn` log line, `parley_ignored_fields_total`, `X-Parley-Ignored-Fields`);
 * `num_ctx` is the request's context, held to the served one and said; a known field of the wrong
 * type is still refused by its name. Through the `ollama` client as LlamaIndex's Ollama package
 * drives it (its options on chat and on embeddings), and raw bodies as other clients send them.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Ollama } from "ollama";
import { DEMO_MODEL_NAME } from "../../src/gguf/presets";
import { allowSlowTests, postJson, presetModel, type ServedModelsApp, serveModels, testDb } from "../support";

allowSlowTests();

const EMBED = "parley-embed";
/** Every model's context here: a larger `num_ctx` is held to it. */
const SERVED_CONTEXT = 512;
/** What LlamaIndex's Ollama package sends with every request, embeddings included. */
const LLAMAINDEX_OPTIONS = { num_ctx: 4096, top_p: 0.9, temperature: 0.7 };

const db = testDb("ollama-lenient");
const logLines: string[] = [];
let service: ServedModelsApp;
let key: string;
let adminKey: string;
let chatModel: string;
/** Random weights: its greedy replies repeat themselves, where penalties bite (the demo's never do). */
let randomModel: string;
/** The headers of the client's last response. */
let lastHeaders = new Headers();
let client: Ollama;

beforeAll(async () => {
  key = (await db.keys.create("alice", "user")).key;
  adminKey = (await db.keys.create("root", "admin")).key;
  service = await serveModels({
    storage: db.storage,
    paths: [await presetModel("demo"), await presetModel("embed"), await presetModel("bench-draft")],
    max: 3,
    keepAliveMs: 60_000,
    contextSize: SERVED_CONTEXT,
    logLines,
  });
  const recording: typeof fetch = Object.assign(async (...args: Parameters<typeof fetch>) => {
    const response = await fetch(...args);
    lastHeaders = response.headers;
    return response;
  }, fetch);
  client = new Ollama({ host: service.served.url, headers: { Authorization: `Bearer ${key}` }, fetch: recording });
  chatModel = DEMO_MODEL_NAME;
  randomModel = (await client.list()).models.find((model) => ![`${EMBED}:latest`, `${DEMO_MODEL_NAME}:latest`].includes(model.name))!.name;
});
afterAll(async () => {
  await service.stop();
  await db.storage.close();
});

const post = async (path: string, body: object) => {
  const response = await fetch(`${service.served.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}` },
    body: JSON.stringify(body),
  });
  return { status: response.status, headers: response.headers, json: (await response.json()) as Record<string, unknown> };
};

/** The warn lines naming ignored fields, as an operator reads them. */
const ignoredLines = () =>
  logLines.map((line) => JSON.parse(line) as { level: string; msg: string; fields?: string[] }).filter((line) => line.fields !== undefined);

/** `parley_ignored_fields_total`'s value for one field label. */
async function ignoredCount(field: string): Promise<number> {
  const text = await (await fetch(`${service.served.url}/metrics`, { headers: { authorization: `Bearer ${adminKey}` } })).text();
  const line = text.split("\n").find((each) => each.startsWith(`parley_ignored_fields_total{protocol="ollama",field="${field}"}`));
  return line === undefined ? 0 : Number(line.split(" ").at(-1));
}

const ask = [{ role: "user", content: "Hello there!" }];

describe("LlamaIndex's options, through the ollama client", () => {
  test("chat: num_ctx above the served context is held to it and said; the sampling options are honoured", async () => {
    const reply = await client.chat({ model: chatModel, messages: ask, stream: false, options: { ...LLAMAINDEX_OPTIONS, num_predict: 8, seed: 1 } });
    expect(reply.done).toBe(true);
    expect(lastHeaders.get("x-parley-clamped-fields")).toBe(`options.num_ctx=${SERVED_CONTEXT}`);
    expect(lastHeaders.get("x-parley-ignored-fields")).toBeNull();
    const streamed = await client.chat({ model: chatModel, messages: ask, stream: true, options: { ...LLAMAINDEX_OPTIONS, num_predict: 8, seed: 1 } });
    expect(lastHeaders.get("x-parley-clamped-fields")).toBe(`options.num_ctx=${SERVED_CONTEXT}`);
    let text = "";
    for await (const part of streamed) text += part.message.content;
    expect(text).toBe(reply.message.content);
    // Within the served context, nothing is said.
    await client.chat({ model: chatModel, messages: ask, stream: false, options: { num_ctx: 256, num_predict: 2 } });
    expect(lastHeaders.get("x-parley-clamped-fields")).toBeNull();
  });

  test("embeddings, old route and new: no option changes a vector, each is ignored and said", async () => {
    const before = await ignoredCount("options.num_ctx");
    const plain = await client.embeddings({ model: EMBED, prompt: "a cat on a mat" });
    const optioned = await client.embeddings({ model: EMBED, prompt: "a cat on a mat", options: LLAMAINDEX_OPTIONS });
    expect(lastHeaders.get("x-parley-ignored-fields")).toBe("options.num_ctx, options.top_p, options.temperature");
    expect(optioned.embedding).toEqual(plain.embedding);
    const embedded = await client.embed({ model: EMBED, input: ["a cat on a mat"], options: LLAMAINDEX_OPTIONS });
    expect(embedded.embeddings).toHaveLength(1);
    expect(lastHeaders.get("x-parley-ignored-fields")).toBe("options.num_ctx, options.top_p, options.temperature");
    expect(await ignoredCount("options.num_ctx")).toBe(before + 2);
  });
});

test("fields Ollama's server ignores (a community provider's temperature, tool_choice; a message's name) are ignored and said", async () => {
  const before = {
    temperature: await ignoredCount("temperature"),
    other: await ignoredCount("other"),
    optionsOther: await ignoredCount("options.other"),
    messages: await ignoredCount("messages.other"),
  };
  const lines = ignoredLines().length;
  const answered = await post("/api/chat", {
    model: chatModel,
    messages: [{ ...ask[0], name: "alice" }],
    stream: false,
    temperature: 0.2,
    tool_choice: "auto",
    frobnicate: { deep: true },
    options: { num_predict: 4, mirostat: 2, num_gpu: 99, no_such_option: 1, logit_bias: { x: 1 } },
  });
  expect(answered.status).toBe(200);
  // logit_bias is OpenAI's, not Ollama's: ignored, not read (its key would be refused there).
  const said = "temperature, tool_choice, frobnicate, options.mirostat, options.num_gpu, options.no_such_option, options.logit_bias, messages[0].name";
  expect(answered.headers.get("x-parley-ignored-fields")).toBe(said);
  const logged = ignoredLines().slice(lines);
  expect(logged).toHaveLength(1);
  expect(logged[0]).toMatchObject({ level: "warn", fields: said.split(", ") });
  // Names outside Ollama's own go under one label each level: the counter's labels stay few.
  expect(await ignoredCount("temperature")).toBe(before.temperature + 1);
  expect(await ignoredCount("other")).toBe(before.other + 1);
  expect(await ignoredCount("options.other")).toBe(before.optionsOther + 2);
  expect(await ignoredCount("messages.other")).toBe(before.messages + 1);
  expect(await ignoredCount("frobnicate")).toBe(0);
  // Through the ollama client, which sends whatever the request object holds, as such providers use it.
  const viaClient = { model: chatModel, messages: ask, stream: false, temperature: 0.2, tool_choice: "auto", options: { num_predict: 2 } };
  expect((await client.chat(viaClient as Parameters<typeof client.chat>[0] & { stream: false })).done).toBe(true);
  expect(lastHeaders.get("x-parley-ignored-fields")).toBe("temperature, tool_choice");
  // The same on generate and show; a request with none says none.
  expect(
    (await post("/api/generate", { model: chatModel, prompt: "Hi", stream: false, tool_choice: "none", options: { num_predict: 2 } })).headers.get(
      "x-parley-ignored-fields",
    ),
  ).toBe("tool_choice");
  expect((await post("/api/show", { model: chatModel, options: { num_ctx: 8 } })).headers.get("x-parley-ignored-fields")).toBe("options");
  expect(
    (await post("/api/chat", { model: chatModel, messages: ask, stream: false, options: { num_predict: 2 } })).headers.get("x-parley-ignored-fields"),
  ).toBeNull();
});

test("a known field of the wrong type is still refused by its name, once", async () => {
  for (const [path, body, field] of [
    ["/api/chat", { model: chatModel, messages: ask, stream: false, options: { num_ctx: "4096" } }, "options.num_ctx"],
    ["/api/chat", { model: chatModel, messages: ask, stream: false, options: { num_gpu: "all" } }, "options.num_gpu"],
    ["/api/chat", { model: chatModel, messages: ask, stream: "yes" }, "stream"],
    ["/api/embeddings", { model: EMBED, prompt: "x", options: { temperature: "hot" } }, "options.temperature"],
    ["/api/generate", { model: chatModel, prompt: "Hi", raw: "yes" }, "raw"],
  ] as const) {
    const refused = await postJson(service.served.url, key, path, body);
    expect(refused.status).toBe(400);
    const { error } = JSON.parse(refused.text) as { error: string };
    expect(error).toStartWith(`${field}: `);
    // The field is named once: "raw: raw: …" was the old way.
    expect(error.slice(field.length + 2)).not.toStartWith(field);
  }
});

describe("options the reply honours", () => {
  /** A conversation far longer than 128 tokens. */
  const long = Array.from({ length: 24 }, (_, i) => ({
    role: i % 2 === 0 ? "user" : "assistant",
    content: `Turn ${i}: tell me about the weather in town ${i}.`,
  }));
  long.push({ role: "user", content: "And now?" });

  test("num_ctx: a long conversation's prompt fits the request's context, its oldest turns left out", async () => {
    const whole = await client.chat({ model: chatModel, messages: long, stream: false, options: { num_predict: 4 } });
    expect(whole.prompt_eval_count).toBeGreaterThan(128);
    for (const stream of [false, true] as const) {
      const request = { model: chatModel, messages: long, options: { num_ctx: 128, num_predict: 4 } };
      const last = stream ? await lastOf(client.chat({ ...request, stream })) : await client.chat({ ...request, stream });
      expect(last.prompt_eval_count).toBeGreaterThan(0);
      expect(last.prompt_eval_count).toBeLessThanOrEqual(128);
    }
  });

  test("a num_ctx too small for the chat template's frame is refused naming it", async () => {
    for (const stream of [false, true]) {
      const refused = await post("/api/chat", { model: chatModel, messages: long, stream, options: { num_ctx: 8 } });
      expect(refused.status).toBe(400);
      expect(refused.json.error).toStartWith("options.num_ctx: a context of 8 tokens leaves");
    }
    // The smallest that leaves the template room is answered.
    expect((await post("/api/chat", { model: chatModel, messages: long, stream: false, options: { num_ctx: 32, num_predict: 2 } })).status).toBe(200);
  });

  test("repeat_last_n: 0 counts no token, so a penalty changes nothing; a window makes it bite", async () => {
    const options = { temperature: 0, seed: 1, num_predict: 48 };
    const say = (extra: object) =>
      client.chat({ model: randomModel, messages: [{ role: "user", content: "Say it again and again" }], stream: false, options: { ...options, ...extra } });
    const plain = (await say({})).message.content;
    expect((await say({ repeat_penalty: 5, repeat_last_n: 0 })).message.content).toBe(plain);
    expect((await say({ repeat_penalty: 5, repeat_last_n: -1 })).message.content).not.toBe(plain);
  });
});

async function lastOf<T>(stream: Promise<AsyncIterable<T>>): Promise<T> {
  let last: T | undefined;
  for await (const part of await stream) last = part;
  return last!;
}
