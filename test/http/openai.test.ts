/**
 * The OpenAI-compatible API through real clients: the official `openai` SDK and the Vercel AI
 * SDK's OpenAI-compatible provider, pointed at a running Parley. The demo model's greedy reply to
 * a short prompt is deterministic: "I am happy to help you." (tokens "I", " am", " happy", …).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { streamText } from "ai";
import OpenAI from "openai";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, bearer, rejection, type Served, serveApp, testDb, testEngine } from "../support";

allowSlowTests();

const GREEDY_REPLY = "I am happy to help you.";
const db = testDb("openai");
const alice = await db.keys.create("alice", "user");
const admin = await db.keys.create("root", "admin");
let engine: Engine;
let served: Served;
/** One request a minute: the second is refused. */
let limited: Served;
let client: OpenAI;
const logLines: string[] = [];

const clientFor = (server: Served, apiKey: string) => new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0 });

beforeAll(async () => {
  engine = await testEngine({ parallel: 3 });
  served = serveApp({ storage: db.storage, engine, logLines });
  limited = serveApp({ storage: db.storage, engine, limits: { rateLimitPerMinute: 1 } });
  client = clientFor(served, alice.key);
});
afterAll(async () => {
  await Promise.all([served.stop(), limited.stop()]);
  await engine.close();
  await db.storage.close();
});

const hello = [{ role: "user" as const, content: "Hello" }];

async function streamed(params: Omit<OpenAI.ChatCompletionCreateParamsStreaming, "model" | "stream">) {
  const chunks: OpenAI.ChatCompletionChunk[] = [];
  for await (const chunk of await client.chat.completions.create({ model: "any", stream: true, ...params })) chunks.push(chunk);
  const text = chunks.map((chunk) => chunk.choices[0]?.delta.content ?? "").join("");
  return { chunks, text, pieces: chunks.flatMap((chunk) => chunk.choices[0]?.delta.content || []) };
}

describe("models", () => {
  test("models.list() names the loaded model; retrieve finds it, and only it", async () => {
    const models = [];
    for await (const model of client.models.list()) models.push(model);
    // `loaded`, `vision` and `purpose` are Parley's own fields, beside OpenAI's.
    expect(models as unknown[]).toEqual([
      { id: engine.modelName, object: "model", created: expect.any(Number), owned_by: "parley", loaded: true, vision: false, purpose: "chat" },
    ]);
    expect((await client.models.retrieve(engine.modelName)).id).toBe(engine.modelName);
    expect(await rejection(client.models.retrieve("gpt-4o"))).toBeInstanceOf(OpenAI.NotFoundError);
  });
});

describe("chat.completions.create", () => {
  test("plain: a chat.completion with the reply, finish_reason and usage", async () => {
    const completion = await client.chat.completions.create({ model: "gpt-4o-mini", messages: hello, temperature: 0 });
    expect(completion.object).toBe("chat.completion");
    expect(completion.id).toStartWith("chatcmpl-");
    expect(completion.model).toBe(engine.modelName);
    expect(completion.choices).toHaveLength(1);
    expect(completion.choices[0]!.message).toMatchObject({ role: "assistant", content: GREEDY_REPLY });
    expect(completion.choices[0]!.finish_reason).toBe("stop");
    const usage = completion.usage!;
    expect(usage.prompt_tokens).toBeGreaterThan(0);
    expect(usage.completion_tokens).toBeGreaterThan(0);
    expect(usage.total_tokens).toBe(usage.prompt_tokens + usage.completion_tokens);
    expect(usage.prompt_tokens_details?.cached_tokens).toBeGreaterThanOrEqual(0);
  });

  test("streamed: the role first, content deltas, then the finish reason; no usage unless asked", async () => {
    const { chunks, text } = await streamed({ messages: hello, temperature: 0 });
    expect(text).toBe(GREEDY_REPLY);
    expect(chunks[0]!.choices[0]!.delta.role).toBe("assistant");
    expect(chunks.every((chunk) => chunk.object === "chat.completion.chunk" && chunk.id === chunks[0]!.id)).toBe(true);
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe("stop");
    expect(chunks.slice(0, -1).every((chunk) => chunk.choices[0]!.finish_reason === null)).toBe(true);
    expect(chunks.every((chunk) => chunk.usage === undefined)).toBe(true);
  });

  test("stream_options.include_usage: a last chunk with no choices and the usage", async () => {
    const { chunks, text } = await streamed({ messages: hello, temperature: 0, stream_options: { include_usage: true } });
    expect(text).toBe(GREEDY_REPLY);
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage!.completion_tokens).toBeGreaterThan(0);
    expect(last.usage!.total_tokens).toBe(last.usage!.prompt_tokens + last.usage!.completion_tokens);
    expect(chunks.slice(0, -1).every((chunk) => chunk.usage === null)).toBe(true);
  });

  test("max_tokens ends the reply with finish_reason length", async () => {
    const completion = await client.chat.completions.create({ model: "any", messages: hello, temperature: 0, max_tokens: 2 });
    expect(completion.choices[0]!.message.content).toBe("I am");
    expect(completion.choices[0]!.finish_reason).toBe("length");
    expect(completion.usage!.completion_tokens).toBe(2);
  });

  // " happy" and " to" are two tokens; "ppy t" starts inside one and ends inside the next.
  for (const stop of ["happy to", "ppy t", ["nothing like it", " happy to"]]) {
    test(`a stop string spanning tokens (${JSON.stringify(stop)}) cuts the reply exactly before it`, async () => {
      const expected = GREEDY_REPLY.slice(0, GREEDY_REPLY.indexOf(typeof stop === "string" ? stop : stop[1]!));
      const completion = await client.chat.completions.create({ model: "any", messages: hello, temperature: 0, stop });
      expect(completion.choices[0]!.message.content).toBe(expected);
      expect(completion.choices[0]!.finish_reason).toBe("stop");

      const { chunks, text, pieces } = await streamed({ messages: hello, temperature: 0, stop });
      expect(text).toBe(expected);
      // Nothing of the stop string was streamed and then taken back.
      expect(pieces.join("")).toBe(expected);
      expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe("stop");
    });
  }

  test("a seed repeats a sampled reply (temperature 1)", async () => {
    const ask = () =>
      client.chat.completions.create({ model: "any", messages: [{ role: "user", content: "Tell me a story" }], temperature: 1, seed: 1234, max_tokens: 24 });
    const [first, second] = [await ask(), await ask()];
    expect(first.choices[0]!.message.content).toBe(second.choices[0]!.message.content!);
    expect(first.choices[0]!.message.content!.length).toBeGreaterThan(0);
  });

  test("system messages and text parts are accepted", async () => {
    const completion = await client.chat.completions.create({
      model: "any",
      temperature: 0,
      max_tokens: 4,
      messages: [
        { role: "system", content: "Be brief." },
        {
          role: "user",
          content: [
            { type: "text", text: "Hel" },
            { type: "text", text: "lo" },
          ],
        },
      ],
    });
    expect(completion.choices[0]!.message.content!.length).toBeGreaterThan(0);
  });
});

describe("errors in OpenAI's shape raise the SDK's typed errors", () => {
  test("a bad key: AuthenticationError (401)", async () => {
    const stranger = clientFor(served, "pk_unknown");
    expect(await rejection(stranger.chat.completions.create({ model: "any", messages: hello }))).toBeInstanceOf(OpenAI.AuthenticationError);
    expect(await rejection(stranger.models.list())).toBeInstanceOf(OpenAI.AuthenticationError);
  });

  test("n: 2 is a BadRequestError (400) naming the parameter", async () => {
    const error = await rejection(client.chat.completions.create({ model: "any", messages: hello, n: 2 }));
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("n");
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).type).toBe("invalid_request_error");
  });

  test("stream_options without stream: true is a BadRequestError naming it, as OpenAI answers", async () => {
    const error = await rejection(client.chat.completions.create({ model: "any", messages: hello, stream_options: { include_usage: true } }));
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("stream_options");
  });

  test("a message with a lone surrogate is a BadRequestError naming messages", async () => {
    const error = await rejection(client.chat.completions.create({ model: "any", messages: [{ role: "user", content: "x\ud800y" }] }));
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("messages");
  });

  test("a temperature over 2 or no messages: BadRequestError (400), not 422", async () => {
    expect(await rejection(client.chat.completions.create({ model: "any", messages: hello, temperature: 2.5 }))).toBeInstanceOf(OpenAI.BadRequestError);
    expect(await rejection(client.chat.completions.create({ model: "any" } as never))).toBeInstanceOf(OpenAI.BadRequestError);
    expect(await rejection(client.chat.completions.create({ model: "any", messages: [{ role: "tool", content: "x", tool_call_id: "t" }] }))).toBeInstanceOf(
      OpenAI.BadRequestError,
    );
  });

  test("over the key's rate limit: RateLimitError (429)", async () => {
    const throttled = clientFor(limited, alice.key);
    await throttled.models.list();
    expect(await rejection(throttled.models.list())).toBeInstanceOf(OpenAI.RateLimitError);
  });

  test("the body: {error: {message, type, param, code}}; the native API keeps its own shape", async () => {
    const response = await fetch(`${served.url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...bearer(alice.key), "content-type": "application/json" },
      body: JSON.stringify({ messages: hello, temperature: 3 }),
    });
    expect(response.status).toBe(400);
    expect(await response.json()).toEqual({
      error: { message: "temperature must be a number from 0 to 2", type: "invalid_request_error", param: "temperature", code: "invalid_request" },
    });
    const unknown = await fetch(`${served.url}/v1/nowhere`);
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { error: { type: string } }).error.type).toBe("not_found_error");
    const native = await fetch(`${served.url}/api/v1.0/chat`, { method: "POST" });
    expect(native.status).toBe(401);
    expect(((await native.json()) as { error: { code: string; request_id: string } }).error).toMatchObject({
      code: "unauthorized",
      request_id: expect.any(String),
    });
  });
});

test("another client: the AI SDK's OpenAI-compatible provider streams a completion", async () => {
  const parley = createOpenAICompatible({ name: "parley", baseURL: `${served.url}/v1`, apiKey: alice.key, includeUsage: true });
  const result = streamText({ model: parley.chatModel(engine.modelName), prompt: "Hello", temperature: 0, maxRetries: 0 });
  const pieces: string[] = [];
  for await (const piece of result.textStream) pieces.push(piece);
  expect(pieces.join("")).toBe(GREEDY_REPLY);
  expect((await result.usage).outputTokens).toBeGreaterThan(0);
});

test("completions are logged and metered like native chats", async () => {
  await client.chat.completions.create({ model: "any", messages: hello, temperature: 0 });
  const lines = logLines.map((line) => JSON.parse(line) as { route?: string; status?: number; tokens?: number; user_id?: number });
  const logged = lines.filter((line) => line.route === "/v1/chat/completions" && line.status === 200);
  expect(logged.length).toBeGreaterThan(0);
  expect(logged.at(-1)).toMatchObject({ tokens: 7, user_id: alice.userId });
  const metrics = await (await fetch(`${served.url}/metrics`, { headers: bearer(admin.key) })).text();
  expect(metrics).toMatch(/route="\/v1\/chat\/completions"/);
});

test("a stateless conversation reuses its KV prefix on every follow-up, between other requests (parallel 3)", async () => {
  // One unrelated request between turns: least-recently-used alone would hand the follow-up the
  // idle sequence; choosing by shared prefix finds the one holding this conversation.
  const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "system", content: "You are a helpful assistant." }];
  let previousPrompt = 0;
  for (let turn = 0; turn < 5; turn++) {
    messages.push({ role: "user", content: `Question ${turn}: what do you think?` });
    const completion = await client.chat.completions.create({ model: "any", messages, temperature: 0, max_tokens: 16 });
    const usage = completion.usage!;
    if (turn > 0) expect(usage.prompt_tokens_details!.cached_tokens!).toBeGreaterThanOrEqual(previousPrompt);
    previousPrompt = usage.prompt_tokens;
    messages.push({ role: "assistant", content: completion.choices[0]!.message.content });
    await client.chat.completions.create({ model: "any", messages: [{ role: "user", content: `Unrelated ${turn}` }], temperature: 0, max_tokens: 4 });
  }
});
