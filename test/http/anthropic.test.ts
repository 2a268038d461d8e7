/**
 * Anthropic's Messages API, spoken by the official @anthropic-ai/sdk: replies plain and streamed
 * (the final message equal to its deltas), stop sequences and max_tokens as stop reasons, the
 * prompt cache, count_tokens, x-api-key and Bearer keys, every refusal as the SDK's typed error,
 * and one rate limit shared with the other protocols.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { ChatAnthropic } from "@langchain/anthropic";
import type { AIMessageChunk } from "@langchain/core/messages";
import OpenAI from "openai";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, bearer, rejection, type Served, serveApp, testDb, testEngine } from "../support";

allowSlowTests();

const GREEDY_REPLY = "I am happy to help you.";
const db = testDb("anthropic");
const alice = await db.keys.create("alice", "user");
let engine: Engine;
let served: Served;
/** Two requests a minute. */
let limited: Served;
/** No model yet: every turn is refused as overloaded. */
let loading: Served;
let client: Anthropic;

const clientFor = (server: Served, apiKey = alice.key) => new Anthropic({ apiKey, baseURL: server.url, maxRetries: 0 });
const hello: Anthropic.MessageParam[] = [{ role: "user", content: "Hello" }];
/** Greedy: the SDK's types no longer name temperature, which Parley (and Anthropic's API) still take. */
const greedy = { temperature: 0 } as object;

beforeAll(async () => {
  engine = await testEngine({ parallel: 2 });
  served = serveApp({ storage: db.storage, engine });
  limited = serveApp({ storage: db.storage, engine, limits: { rateLimitPerMinute: 2 } });
  loading = serveApp({ storage: db.storage });
  client = clientFor(served);
});
afterAll(async () => {
  await Promise.all([served.stop(), limited.stop(), loading.stop()]);
  await engine.close();
  await db.storage.close();
});

describe("messages.create", () => {
  test("a message with one text block, its stop reason and usage; the same reply as the other protocols give", async () => {
    const message = await client.messages.create({ model: "claude-sonnet-4-5", max_tokens: 64, messages: hello, ...greedy });
    expect(message).toMatchObject({ type: "message", role: "assistant", model: engine.modelName, stop_reason: "end_turn", stop_sequence: null });
    expect(message.id).toStartWith("msg_");
    expect(message.content).toEqual([{ type: "text", text: GREEDY_REPLY, citations: null }]);
    expect(message.usage.output_tokens).toBeGreaterThan(0);
    expect(message.usage.input_tokens + message.usage.cache_read_input_tokens!).toBeGreaterThan(0);
  });

  test("a system prompt, max_tokens and a stop sequence end it as Anthropic says", async () => {
    const cut = await client.messages.create({ model: "any", max_tokens: 2, messages: hello, ...greedy });
    expect(cut).toMatchObject({ stop_reason: "max_tokens", content: [{ type: "text", text: "I am" }] });
    expect(cut.usage.output_tokens).toBe(2);
    const stopped = await client.messages.create({ model: "any", max_tokens: 64, messages: hello, ...greedy, stop_sequences: ["zzz", "help"] });
    expect(stopped).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: "help", content: [{ type: "text", text: "I am happy to " }] });
    const system = await client.messages.create({
      model: "any",
      max_tokens: 8,
      system: [{ type: "text", text: "You are terse." }],
      messages: hello,
      ...greedy,
    });
    const bare = await client.messages.create({ model: "any", max_tokens: 8, messages: hello, ...greedy });
    expect(system.usage.input_tokens + system.usage.cache_read_input_tokens!).toBeGreaterThan(bare.usage.input_tokens + bare.usage.cache_read_input_tokens!);
  });

  test("a follow-up repeating the history reads it from the cache; count_tokens counts the same prompt", async () => {
    const history: Anthropic.MessageParam[] = [{ role: "user", content: "Tell me about the sea" }];
    const first = await client.messages.create({ model: "any", max_tokens: 16, messages: history, ...greedy });
    const next: Anthropic.MessageParam[] = [...history, { role: "assistant", content: first.content }, { role: "user", content: "And the mountains?" }];
    const second = await client.messages.create({ model: "any", max_tokens: 16, messages: next, ...greedy });
    expect(second.usage.cache_read_input_tokens).toBeGreaterThan(first.usage.input_tokens);
    const counted = await client.messages.countTokens({ model: "any", messages: next });
    expect(counted.input_tokens).toBe(second.usage.input_tokens + second.usage.cache_read_input_tokens!);
  });
});

describe("messages.stream", () => {
  test("Anthropic's events in order; the final message is the deltas together", async () => {
    const stream = client.messages.stream({ model: "any", max_tokens: 64, messages: hello, ...greedy });
    const types: string[] = [];
    let text = "";
    let started: Anthropic.Usage | undefined;
    stream.on("streamEvent", (event) => {
      types.push(event.type);
      // A copy: the SDK accumulates the final message into this very object.
      if (event.type === "message_start") started = { ...event.message.usage };
    });
    stream.on("text", (delta) => (text += delta));
    const final = await stream.finalMessage();
    expect(text).toBe(GREEDY_REPLY);
    expect(final.content as unknown[]).toEqual([{ type: "text", text: GREEDY_REPLY, citations: null }]);
    expect(final).toMatchObject({ stop_reason: "end_turn", model: engine.modelName });
    expect(final.usage.output_tokens).toBeGreaterThan(0);
    expect(types[0]).toBe("message_start");
    // message_start counts the prompt as the plain reply does (LangChain's input tokens come from it).
    const plain = await client.messages.create({ model: "any", max_tokens: 64, messages: hello, ...greedy });
    const prompt = (usage: Anthropic.Usage) => usage.input_tokens + (usage.cache_read_input_tokens ?? 0);
    expect(prompt(started!)).toBeGreaterThan(0);
    expect(prompt(started!)).toBe(prompt(plain.usage));
    expect(types.slice(-3)).toEqual(["content_block_stop", "message_delta", "message_stop"]);
    expect(new Set(types.slice(2, -3))).toEqual(new Set(["content_block_delta"]));
  });
});

describe("another client: LangChain's ChatAnthropic", () => {
  test("a stream reports the prompt's input tokens, as the plain reply does", async () => {
    const chat = new ChatAnthropic({ model: "any", apiKey: alice.key, anthropicApiUrl: served.url, maxTokens: 16, temperature: 0, maxRetries: 0 });
    let streamed: AIMessageChunk | undefined;
    for await (const chunk of await chat.stream("Hello")) streamed = streamed ? streamed.concat(chunk) : chunk;
    const plain = await chat.invoke("Hello");
    expect(streamed!.content).toBe(plain.content);
    expect(streamed!.usage_metadata!.input_tokens).toBeGreaterThan(0);
    expect(streamed!.usage_metadata!.input_tokens).toBe(plain.usage_metadata!.input_tokens);
  });
});

describe("tools", () => {
  const weather: Anthropic.Tool = {
    name: "get_weather",
    description: "The weather in a city",
    input_schema: {
      type: "object",
      properties: { city: { type: "string" }, unit: { type: "string", enum: ["c", "f"] } },
      required: ["city", "unit"],
      additionalProperties: false,
    },
  };
  const ask: Anthropic.MessageParam[] = [{ role: "user", content: "What is the weather in Paris?" }];
  const forced = { model: "any", max_tokens: 300, messages: ask, tools: [weather], tool_choice: { type: "tool" as const, name: "get_weather" }, ...greedy };
  const validInput = (input: unknown) => {
    const { city, unit, ...rest } = input as Record<string, unknown>;
    expect(typeof city).toBe("string");
    expect(["c", "f"]).toContain(unit as string);
    expect(rest).toEqual({});
  };

  test("a forced call is a tool_use block whose input is valid against input_schema, stop_reason tool_use; streamed, the same", async () => {
    const message = await client.messages.create(forced);
    expect(message.stop_reason).toBe("tool_use");
    const calls = message.content.filter((block) => block.type === "tool_use");
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ name: "get_weather", caller: { type: "direct" } });
    validInput(calls[0]!.input);

    const streamed = await client.messages.stream(forced).finalMessage();
    expect(streamed.stop_reason).toBe("tool_use");
    const streamedCall = streamed.content.find((block) => block.type === "tool_use");
    expect(streamedCall?.input).toEqual(calls[0]!.input);
  });

  test("a tool_result round trip: the call and its result in the history, the model answers; a result answering no call is refused", async () => {
    const called = await client.messages.create(forced);
    const call = called.content.find((block) => block.type === "tool_use")!;
    const history: Anthropic.MessageParam[] = [
      ...ask,
      { role: "assistant", content: called.content },
      { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content: "18 degrees and sunny" }] },
    ];
    const answer = await client.messages.create({ model: "any", max_tokens: 16, messages: history, tools: [weather], ...greedy });
    expect(answer.content[0]?.type).toBe("text");
    // The history the model was given holds the call and its result: more tokens than the question alone.
    expect(answer.usage.input_tokens + answer.usage.cache_read_input_tokens!).toBeGreaterThan(
      called.usage.input_tokens + called.usage.cache_read_input_tokens! + 10,
    );
    const orphan = await rejection(
      client.messages.create({
        model: "any",
        max_tokens: 16,
        messages: [...ask, { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_nothing", content: "?" }] }],
      }),
    );
    expect(orphan).toBeInstanceOf(Anthropic.BadRequestError);
    expect((orphan as Error).message).toContain("messages[1].content[0].tool_use_id");
  });

  test("a tool schema the grammar cannot hold is refused naming input_schema once, as Anthropic spells it", async () => {
    const tools = [{ name: "f", input_schema: { type: "object" as const, properties: { a: { type: "strnig" } } } }];
    const refusal = await rejection(client.messages.create({ model: "any", max_tokens: 8, messages: hello, tools }));
    expect(refusal).toBeInstanceOf(Anthropic.BadRequestError);
    expect((refusal as InstanceType<typeof Anthropic.BadRequestError>).error).toEqual({
      type: "error",
      error: { type: "invalid_request_error", message: 'tools[0].input_schema: the schema at /properties/a has type "strnig"' },
    });
  });
});

describe("keys and refusals", () => {
  test("x-api-key as Anthropic's clients send it, or Bearer; no key or a wrong one is AuthenticationError", async () => {
    const bearerClient = new Anthropic({ authToken: alice.key, apiKey: null, baseURL: served.url, maxRetries: 0 });
    expect((await bearerClient.messages.create({ model: "any", max_tokens: 2, messages: hello })).type).toBe("message");
    expect(
      await rejection(clientFor(served, "pk_not_a_key_00000000000000000000000000").messages.create({ model: "any", max_tokens: 2, messages: hello })),
    ).toBeInstanceOf(Anthropic.AuthenticationError);
    // x-api-key is Anthropic's, taken on its API only: the model listing without anthropic-version is OpenAI's.
    expect((await fetch(`${served.url}/v1/models`, { headers: { "x-api-key": alice.key } })).status).toBe(401);
  });

  test("the SDK lists and retrieves models in Anthropic's shape (anthropic-version and x-api-key, as it sends them)", async () => {
    const models = [];
    for await (const model of client.models.list()) models.push(model);
    expect(models as unknown[]).toEqual([
      { type: "model", id: engine.modelName, display_name: engine.modelName, created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) },
    ]);
    expect(await client.models.retrieve(engine.modelName)).toEqual(models[0]!);
    const page = await client.models.list({ limit: 1 });
    expect(page.data).toHaveLength(1);
    expect(page.has_more).toBe(false);
    const missing = await rejection(client.models.retrieve("claude-opus-4-1"));
    expect(missing).toBeInstanceOf(Anthropic.NotFoundError);
    expect((await rejection(client.models.list({ after_id: "nothing" }))) as object).toBeInstanceOf(Anthropic.BadRequestError);
    // The same path without anthropic-version is OpenAI's list.
    const openai = (await (await fetch(`${served.url}/v1/models`, { headers: bearer(alice.key) })).json()) as { object: string };
    expect(openai.object).toBe("list");
  });

  test("a field Parley cannot honour, a missing one or an unknown one is BadRequestError naming it, in Anthropic's shape", async () => {
    for (const [params, named] of [
      [{ tool_choice: { type: "tool", name: "get_weather" } }, "tool_choice"],
      // The demo model has no thoughts to bound.
      [{ thinking: { type: "enabled", budget_tokens: 4 } }, "thinking"],
      [{ temperature: 1.5 }, "temperature"],
      [{ output_config: { effort: "high" } }, "output_config"],
      [{ frequency_penalty: 1 }, "frequency_penalty"],
    ] as const) {
      const refusal = await rejection(
        client.messages.create({ model: "any", max_tokens: 8, messages: hello, ...(params as object) } as Anthropic.MessageCreateParamsNonStreaming),
      );
      expect(refusal).toBeInstanceOf(Anthropic.BadRequestError);
      expect((refusal as InstanceType<typeof Anthropic.BadRequestError>).error).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
      expect((refusal as Error).message).toContain(named);
    }
    // A prefill (a final assistant message) would be continued by Anthropic: refused, not answered as a new turn.
    const prefill = await rejection(client.messages.create({ model: "any", max_tokens: 8, messages: [...hello, { role: "assistant", content: "Sure," }] }));
    expect(prefill).toBeInstanceOf(Anthropic.BadRequestError);
    expect((prefill as Error).message).toContain("messages[1]");
    const response = await fetch(`${served.url}/v1/messages`, {
      method: "POST",
      headers: { ...bearer(alice.key), "content-type": "application/json" },
      body: JSON.stringify({ model: "any", messages: hello }),
    });
    expect(response.status).toBe(400);
    expect(await response.json()).toEqual({ type: "error", error: { type: "invalid_request_error", message: expect.stringContaining("max_tokens") } });
  });

  test("a body over the limit is request_too_large (413)", async () => {
    const small = serveApp({ storage: db.storage, engine, limits: { bodyLimitBytes: 1024, pictureBodyLimitBytes: 1024 } });
    try {
      const refusal = await rejection(
        clientFor(small).messages.create({ model: "any", max_tokens: 2, messages: [{ role: "user", content: "x".repeat(4096) }] }),
      );
      expect(refusal).toBeInstanceOf(Anthropic.APIError);
      expect(refusal).toMatchObject({ status: 413, error: { type: "error", error: { type: "request_too_large" } } });
    } finally {
      await small.stop();
    }
  });

  test("an unknown path is NotFoundError; no model yet is overloaded_error (503)", async () => {
    expect(await rejection(client.get("/v1/messages/nowhere"))).toBeInstanceOf(Anthropic.NotFoundError);
    const overloaded = await rejection(clientFor(loading).messages.create({ model: "any", max_tokens: 2, messages: hello }));
    expect(overloaded).toBeInstanceOf(Anthropic.InternalServerError);
    expect(overloaded).toMatchObject({ status: 503, error: { type: "error", error: { type: "overloaded_error" } } });
  });

  test("one key's stream cap is shared with the other protocols: an Anthropic stream beside an open OpenAI one is RateLimitError", async () => {
    // bench-small never ends a reply by itself: the OpenAI stream holds its slot until it is left.
    const endless = await testEngine({ preset: "bench-small", parallel: 2, contextSize: 512 });
    const capped = serveApp({ storage: db.storage, engine: endless, limits: { maxStreamsPerKey: 1 } });
    const leaving = new AbortController();
    try {
      const openai = new OpenAI({ apiKey: alice.key, baseURL: `${capped.url}/v1`, maxRetries: 0 });
      const open = await openai.chat.completions.create(
        { model: "any", messages: [{ role: "user", content: "Talk" }], max_tokens: 400, stream: true },
        { signal: leaving.signal },
      );
      await open[Symbol.asyncIterator]().next();
      const refusal = await rejection(clientFor(capped).messages.create({ model: "any", max_tokens: 4, messages: hello, stream: true }));
      expect(refusal).toBeInstanceOf(Anthropic.RateLimitError);
      expect(refusal).toMatchObject({ error: { type: "error", error: { type: "rate_limit_error" } } });
    } finally {
      leaving.abort();
      await capped.stop();
      await endless.close();
    }
  });

  test("one key's rate limit is shared with the other protocols: RateLimitError once it is spent", async () => {
    const openai = new OpenAI({ apiKey: alice.key, baseURL: `${limited.url}/v1`, maxRetries: 0 });
    const openAiHello = [{ role: "user" as const, content: "Hello" }];
    await openai.chat.completions.create({ model: "any", messages: openAiHello, max_tokens: 2 });
    await clientFor(limited).messages.create({ model: "any", max_tokens: 2, messages: hello });
    expect(await rejection(clientFor(limited).messages.create({ model: "any", max_tokens: 2, messages: hello }))).toBeInstanceOf(Anthropic.RateLimitError);
    expect(await rejection(openai.chat.completions.create({ model: "any", messages: openAiHello, max_tokens: 2 }))).toBeInstanceOf(OpenAI.RateLimitError);
  });
});
