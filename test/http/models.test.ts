/**
 * Several models in one service: each request answered by the model it names (the default when
 * none or "parley", an alias as its model, an unknown one 404), on both protocols, plain and streamed; at
 * most one loaded at a time, a model with a running stream never unloaded under it; idle models
 * unloaded after their keep-alive; a conversation continued on another model evaluated afresh.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import type { ChatReply } from "../../src/http/contract";
import { allowSlowTests, postChat, presetModel, readSse, rejection, type Served, type ServedModelsApp, serveModels, testDb, until } from "../support";

allowSlowTests();

const DEMO = "parley-demo";
const BENCH = "parley-bench-small";

const db = testDb("models-http");
let key: string;
/** A user whose turns go only to the conversation moved between models. */
let bob: string;

beforeAll(async () => {
  key = (await db.keys.create("alice", "user")).key;
  bob = (await db.keys.create("bob", "user")).key;
});
afterAll(async () => {
  await db.storage.close();
});

/** A service of the demo model (the default) and bench-small, `max` loaded at once. */
const serveBoth = async (options: { max: number; keepAliveMs: number }) =>
  serveModels({ storage: db.storage, paths: [await presetModel("demo"), await presetModel("bench-small")], aliases: { "gpt-4o-mini": BENCH }, ...options });

const chat = async (served: Served, body: Record<string, unknown>, as = key) => {
  const response = await postChat(served.url, as, { temperature: 0, max_tokens: 6, ...body });
  return { status: response.status, body: (await response.json()) as ChatReply & { error?: { code: string } } };
};

async function streamed(served: Served, body: Record<string, unknown>): Promise<ChatReply> {
  for await (const { event, data } of readSse(await postChat(served.url, key, { temperature: 0, max_tokens: 6, stream: true, ...body })))
    if (event === "done") return data as ChatReply;
  throw new Error("the stream ended without its done event");
}

describe("two models, both loaded", () => {
  let service: ServedModelsApp;
  let client: OpenAI;
  let anthropic: Anthropic;
  beforeAll(async () => {
    service = await serveBoth({ max: 2, keepAliveMs: -1 });
    client = new OpenAI({ apiKey: key, baseURL: `${service.served.url}/v1`, maxRetries: 0 });
    anthropic = new Anthropic({ apiKey: key, baseURL: service.served.url, maxRetries: 0 });
  });
  afterAll(() => service.stop());

  test("each request is answered by the model it names, plain and streamed, on both protocols; the default when none; an alias as its model", async () => {
    const plain = await chat(service.served, { message: "Hello", conversation_id: "pick-1", model: BENCH });
    expect(plain.body.model).toBe(BENCH);
    expect((await streamed(service.served, { message: "Hello", conversation_id: "pick-2", model: DEMO })).model).toBe(DEMO);
    expect((await chat(service.served, { message: "Hello", conversation_id: "pick-3" })).body.model).toBe(DEMO);

    const asked = (model: string) => client.chat.completions.create({ model, messages: [{ role: "user", content: "Hello" }], temperature: 0, max_tokens: 6 });
    const [demo, bench, alias] = await Promise.all([asked(DEMO), asked(BENCH), asked("gpt-4o-mini")]);
    expect([demo.model, bench.model, alias.model]).toEqual([DEMO, BENCH, BENCH]);
    // Two different models: their greedy replies differ; an alias's is its model's.
    expect(demo.choices[0]!.message.content).not.toBe(bench.choices[0]!.message.content);
    expect(alias.choices[0]!.message.content).toBe(bench.choices[0]!.message.content);
    const stream = await client.chat.completions.create({
      model: BENCH,
      messages: [{ role: "user", content: "Hello" }],
      temperature: 0,
      max_tokens: 6,
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    expect(text).toBe(bench.choices[0]!.message.content!);
    // Anthropic's Messages API picks the same way.
    const message = await anthropic.messages.create({
      model: "gpt-4o-mini",
      max_tokens: 6,
      messages: [{ role: "user", content: "Hello" }],
      temperature: 0,
    } as Anthropic.MessageCreateParamsNonStreaming);
    expect(message.model).toBe(BENCH);
    expect(message.content).toEqual([{ type: "text", text: bench.choices[0]!.message.content!, citations: null }]);
    // "parley", the name the docs' examples send, stays the default's beside a second model.
    expect((await asked("parley")).model).toBe(DEMO);
    expect((await chat(service.served, { message: "Hello", conversation_id: "pick-4", model: "parley" })).body.model).toBe(DEMO);
    expect((await anthropic.messages.create({ model: "parley", max_tokens: 2, messages: [{ role: "user", content: "Hello" }] })).model).toBe(DEMO);

    const listed = [];
    for await (const model of client.models.list()) listed.push(model);
    expect(listed.map((model) => [model.id, (model as unknown as { loaded: boolean }).loaded])).toEqual([
      [DEMO, true],
      [BENCH, true],
    ]);
  });

  test("an unknown model is 404 model_not_found, and nothing of its turn is stored", async () => {
    const refused = await chat(service.served, { message: "Hello", conversation_id: "unknown", model: "gpt-5" });
    expect(refused.status).toBe(404);
    expect(refused.body.error!.code).toBe("model_not_found");
    const sdk = await rejection(client.chat.completions.create({ model: "gpt-5", messages: [{ role: "user", content: "Hello" }] }));
    expect(sdk).toBeInstanceOf(OpenAI.NotFoundError);
    expect(sdk).toMatchObject({ code: "model_not_found" });
    const messages = await rejection(anthropic.messages.create({ model: "claude-opus-4-1", max_tokens: 6, messages: [{ role: "user", content: "Hello" }] }));
    expect(messages).toBeInstanceOf(Anthropic.NotFoundError);
    expect(messages).toMatchObject({ error: { type: "error", error: { type: "not_found_error", message: expect.stringContaining("model") } } });
    const listing = await fetch(`${service.served.url}/api/v1.0/chat/messages?conversation_id=unknown`, { headers: { authorization: `Bearer ${key}` } });
    expect(((await listing.json()) as { data: unknown[] }).data).toEqual([]);
    const conversations = await fetch(`${service.served.url}/api/v1.0/chat/conversations`, { headers: { authorization: `Bearer ${key}` } });
    expect(((await conversations.json()) as { data: { conversation_id: string }[] }).data.map((row) => row.conversation_id)).not.toContain("unknown");
  });

  test("a conversation continued on another model is evaluated afresh there, then reuses that model's own cache", async () => {
    const first = await chat(service.served, { message: "Hello", conversation_id: "switch", model: DEMO }, bob);
    const again = await chat(service.served, { message: "And then?", conversation_id: "switch", model: DEMO }, bob);
    expect(again.body.usage.cached_tokens).toBeGreaterThan(0);
    // What any user's first turn reuses on bench-small: the chat template's opening, nobody's data.
    const newcomer = (await db.keys.create("carol", "user")).key;
    const opening = (await chat(service.served, { message: "Hi", conversation_id: "first", model: BENCH }, newcomer)).body.usage.cached_tokens;
    const moved = await chat(service.served, { message: "Go on", conversation_id: "switch", model: BENCH }, bob);
    expect(moved.body.model).toBe(BENCH);
    // The whole history, evaluated by bench-small: nothing of the demo model's state.
    expect(moved.body.usage.cached_tokens).toBe(opening);
    expect(moved.body.usage.prompt_tokens).toBeGreaterThan(first.body.usage.prompt_tokens);
    const stays = await chat(service.served, { message: "More", conversation_id: "switch", model: BENCH }, bob);
    // Each stored reply names the model that wrote it.
    const listing = await fetch(`${service.served.url}/api/v1.0/chat/messages?conversation_id=switch&sort_by=id:asc`, {
      headers: { authorization: `Bearer ${bob}` },
    });
    const replies = ((await listing.json()) as { data: { role: string; model?: string }[] }).data.filter((message) => message.role === "assistant");
    expect(replies.map((message) => message.model)).toEqual([DEMO, DEMO, BENCH, BENCH]);
    expect(stays.body.usage.cached_tokens).toBeGreaterThanOrEqual(moved.body.usage.prompt_tokens);
  });
});

test("with a cap of one: alternating requests load and unload; a model with a running stream is not unloaded while another's request waits", async () => {
  const service = await serveBoth({ max: 1, keepAliveMs: -1 });
  try {
    for (const model of [DEMO, BENCH, DEMO])
      expect((await chat(service.served, { message: "Hi", conversation_id: `alt-${model}`, model })).body.model).toBe(model);
    expect(service.loads).toEqual([DEMO, BENCH, DEMO]);

    // bench-small never ends a reply by itself: the stream holds it until cancelled.
    const leaving = new AbortController();
    const long = await postChat(
      service.served.url,
      key,
      { message: "Talk", conversation_id: "long", model: BENCH, max_tokens: 2000, stream: true },
      leaving.signal,
    );
    const events = readSse(long);
    for (;;) if ((await events.next()).value?.event === "delta") break;
    const waiting = chat(service.served, { message: "Me next", conversation_id: "waits", model: DEMO });
    await until(() => service.memory.waiting === 1, "the demo request to wait for room");
    // Still streaming from bench-small, the demo model not loaded under it.
    expect(service.memory.isLoaded(BENCH)).toBe(true);
    expect(service.memory.isLoaded(DEMO)).toBe(false);
    expect((await events.next()).value?.event).toBe("delta");
    leaving.abort();
    expect((await waiting).body.model).toBe(DEMO);
    expect(service.mostAtOnce()).toBe(1);
  } finally {
    await service.stop();
  }
});

test("an idle model is unloaded once its keep-alive has passed, and loaded again on demand", async () => {
  const service = await serveBoth({ max: 2, keepAliveMs: 150 });
  try {
    expect((await chat(service.served, { message: "Hi", conversation_id: "idle", model: BENCH })).body.model).toBe(BENCH);
    await until(() => !service.memory.isLoaded(BENCH), "bench-small to be unloaded after its keep-alive");
    expect((await chat(service.served, { message: "Again", conversation_id: "idle", model: BENCH })).body.model).toBe(BENCH);
    expect(service.loads).toEqual([BENCH, BENCH]);
  } finally {
    await service.stop();
  }
});

test("Ollama's load and unload: no prompt loads a model; with keep_alive 0 it goes once idle", async () => {
  const service = await serveBoth({ max: 2, keepAliveMs: -1 });
  try {
    const generate = async (body: object) =>
      (await (
        await fetch(`${service.served.url}/api/generate`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}` },
          body: JSON.stringify({ model: BENCH, prompt: "", ...body }),
        })
      ).json()) as {
        done_reason: string;
      };
    expect((await generate({})).done_reason).toBe("load");
    expect(service.memory.isLoaded(BENCH)).toBe(true);
    expect((await generate({ keep_alive: 0 })).done_reason).toBe("unload");
    await until(() => !service.memory.isLoaded(BENCH), "bench-small to be unloaded");
  } finally {
    await service.stop();
  }
});

test("a client's keep_alive (Ollama's) holds a model no longer than the operator's keep-alive", async () => {
  const service = await serveBoth({ max: 2, keepAliveMs: 150 });
  try {
    const ollamaChat = (keepAlive: unknown) =>
      fetch(`${service.served.url}/api/chat`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}` },
        body: JSON.stringify({ model: BENCH, messages: [{ role: "user", content: "Hi" }], stream: false, options: { num_predict: 2 }, keep_alive: keepAlive }),
      });
    // An hour asked, 150 ms allowed; and for ever (-1) is the operator's too.
    for (const keepAlive of ["1h", -1]) {
      expect((await ollamaChat(keepAlive)).status).toBe(200);
      await until(() => !service.memory.isLoaded(BENCH), `bench-small unloaded after the operator's keep-alive, keep_alive ${keepAlive} asked`);
    }
  } finally {
    await service.stop();
  }
});
