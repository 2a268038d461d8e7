/**
 * A reasoning model over real HTTP: the `qwen3-thinking` preset answers `<think>\n…\n</think>\n\n…`
 * with Qwen3's own chat template, and Parley keeps the thought apart from the answer, as each
 * PARLEY_REASONING mode says, in both APIs.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Template } from "@huggingface/jinja";
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import { readGgufFileInfo } from "node-llama-cpp";
import type { ChatReply, MessagePage, Message as StoredMessage } from "../../src/http/contract";
import type { ChatCompletion, ChatCompletionChunk } from "../../src/http/openai/contract";
import type { Engine, GenerateRequest, GenerateResult, ReasoningMode } from "../../src/llm/engine";
import { allowSlowTests, bearer, postChat, presetModel, readSse, type Served, type SseEvent, serveApp, sseEvents, testDb, testEngine } from "../support";

allowSlowTests();

/** Template text that must never reach a client as part of a reply. */
const MARKERS = ["<think>", "</think>", "<|im_end|>", "<|im_start|>"];

const db = testDb("reasoning");
const alice = await db.keys.create("alice", "user");

interface Mode {
  engine: Engine;
  served: Served;
  /** What the engine was really asked and really evaluated: observed, not replaced. */
  generations: { request: GenerateRequest; result: GenerateResult }[];
}

const modes = {} as Record<ReasoningMode, Mode>;
let chatTemplate: Template;

beforeAll(async () => {
  for (const reasoning of ["separate", "hide", "inline"] as const) {
    const engine = await testEngine({ preset: "qwen3-thinking", parallel: 1, contextSize: 1024, reasoning });
    const generations: Mode["generations"] = [];
    const generate = engine.generate.bind(engine);
    engine.generate = async function* (request) {
      const result = yield* generate(request);
      generations.push({ request, result });
      return result;
    };
    modes[reasoning] = { engine, served: serveApp({ storage: db.storage, engine }), generations };
  }
  const info = await readGgufFileInfo(await presetModel("qwen3-thinking"));
  chatTemplate = new Template(info.metadata.tokenizer!.chat_template!);
});
afterAll(async () => {
  for (const { served, engine } of Object.values(modes)) {
    await served.stop();
    await engine.close();
  }
  await db.storage.close();
});

async function chat(mode: ReasoningMode, body: Record<string, unknown>): Promise<ChatReply> {
  const response = await postChat(modes[mode].served.url, alice.key, body);
  expect(response.status).toBe(200);
  return (await response.json()) as ChatReply;
}

async function stream(mode: ReasoningMode, body: Record<string, unknown>): Promise<SseEvent[]> {
  const response = await postChat(modes[mode].served.url, alice.key, { ...body, stream: true });
  expect(response.status).toBe(200);
  const events: SseEvent[] = [];
  for await (const event of readSse(response)) if (event.event !== "comment") events.push(event);
  return events;
}

async function stored(mode: ReasoningMode, conversationId: string): Promise<StoredMessage[]> {
  const response = await fetch(`${modes[mode].served.url}/api/v1.0/chat/messages?conversation_id=${conversationId}&sort_by=id:asc`, {
    headers: bearer(alice.key),
  });
  return ((await response.json()) as MessagePage).data;
}

const completion = (mode: ReasoningMode, body: Record<string, unknown>) =>
  fetch(`${modes[mode].served.url}/v1/chat/completions`, {
    method: "POST",
    headers: { ...bearer(alice.key), "content-type": "application/json" },
    body: JSON.stringify({ model: "any", temperature: 0, ...body }),
  });

async function completionChunks(mode: ReasoningMode, body: Record<string, unknown>): Promise<ChatCompletionChunk[]> {
  const response = await completion(mode, { ...body, stream: true });
  expect(response.status).toBe(200);
  const chunks: ChatCompletionChunk[] = [];
  for await (const { event, data } of sseEvents(response)) if (event === "message" && data !== "[DONE]") chunks.push(JSON.parse(data) as ChatCompletionChunk);
  return chunks;
}

const contents = (events: SseEvent[], name: string) =>
  events.filter((event) => event.event === name).map((event) => (event.data as { content: string }).content);

const expectNoMarkers = (...texts: string[]) => {
  for (const text of texts) for (const marker of MARKERS) expect(text).not.toContain(marker);
};

/** The prompt Qwen3's template renders for `messages`, as the model's own file ships it. */
const rendered = (messages: object[]) => chatTemplate.render({ messages, add_generation_prompt: true });

/** The greedy reply of the separate mode to "Hello there!", which the other modes are compared with. */
let reference: ChatReply;

describe("PARLEY_REASONING=separate (the default)", () => {
  test("a plain reply: the thought in message.reasoning, the answer alone in content; stored and listed apart", async () => {
    reference = await chat("separate", { message: "Hello there!", conversation_id: "plain", temperature: 0 });
    const { message } = reference;
    expect(message.finish_reason).toBe("stop");
    expect(message.reasoning!.length).toBeGreaterThan(0);
    expect(message.content.length).toBeGreaterThan(0);
    expectNoMarkers(message.content, message.reasoning!);
    // Trimmed as the template trims them when it renders a thought back.
    expect(message.reasoning).toBe(message.reasoning!.trim());
    expect(message.content).toBe(message.content.trim());
    expect(reference.user_message).not.toHaveProperty("reasoning");
    expect(await stored("separate", "plain")).toEqual([reference.user_message, message]);
    // The engine generated the whole of it: the thought's tokens count as the reply's.
    expect(reference.usage.completion_tokens).toBe(modes.separate.generations.at(-1)!.result.completionTokens);
  });

  test("a streamed reply: reasoning events, all before the first delta, each kind concatenating to its field; no marker in any", async () => {
    const events = await stream("separate", { message: "Hello there!", conversation_id: "streamed", temperature: 0 });
    const names = events.map((event) => event.event);
    const firstDelta = names.indexOf("delta");
    expect(names[0]).toBe("start");
    expect(names.at(-1)).toBe("done");
    expect(names.lastIndexOf("reasoning")).toBeLessThan(firstDelta);
    expect(names.slice(1, firstDelta).every((name) => name === "reasoning")).toBe(true);
    expect(names.slice(firstDelta, -1).every((name) => name === "delta")).toBe(true);
    expect(contents(events, "reasoning").length).toBeGreaterThanOrEqual(2);

    const done = events.at(-1)!.data as ChatReply;
    expect(contents(events, "reasoning").join("")).toBe(done.message.reasoning!);
    expect(contents(events, "delta").join("")).toBe(done.message.content);
    expectNoMarkers(...contents(events, "reasoning"), ...contents(events, "delta"));
    expect(done.message).toMatchObject({ content: reference.message.content, reasoning: reference.message.reasoning });
    expect(await stored("separate", "streamed")).toEqual([done.user_message, done.message]);
  });

  test("turn 2's prompt is what Qwen3's template renders: turn 1's thought is given to it, and it drops the thought", async () => {
    const first = await chat("separate", { message: "Hello there!", conversation_id: "history", temperature: 0 });
    await chat("separate", { message: "And then?", conversation_id: "history", temperature: 0 });
    const { request, result } = modes.separate.generations.at(-1)!;
    expect(request.history).toEqual([
      { role: "user", content: "Hello there!" },
      { role: "assistant", content: first.message.content, reasoning: first.message.reasoning },
      { role: "user", content: "And then?" },
    ]);
    expect(result.prompt).toBe(
      rendered([
        { role: "user", content: "Hello there!" },
        { role: "assistant", content: first.message.content, reasoning_content: first.message.reasoning },
        { role: "user", content: "And then?" },
      ]),
    );
    expect(result.prompt).toContain(first.message.content);
    expect(result.prompt).not.toContain(first.message.reasoning!);
    // Up to the first reply, which the template renders without the thought the sequence holds.
    expect(result.cachedTokens).toBeGreaterThan(0);
  });

  test("a reply cut while thinking keeps its thought, with an empty answer", async () => {
    const cut = await chat("separate", { message: "Hello there!", conversation_id: "cut", temperature: 0, max_tokens: 4 });
    expect(cut.message).toMatchObject({ finish_reason: "length", content: "" });
    // Every token of a reply cut inside its thought is the thought's; a whole reply's answer is not.
    const [whole, thinking] = [
      modes.separate.generations.find(({ request }) => request.conversationKey !== undefined && request.maxTokens !== 4)!.result,
      modes.separate.generations.at(-1)!.result,
    ];
    expect(thinking.reasoningTokens).toBe(4);
    expect(whole.reasoningTokens).toBeGreaterThan(0);
    expect(whole.reasoningTokens).toBeLessThan(whole.completionTokens);
    expect(reference.message.reasoning!.startsWith(cut.message.reasoning!)).toBe(true);
    expect(cut.message.reasoning!.length).toBeGreaterThan(0);
  });
});

describe("the OpenAI API", () => {
  const hello = [{ role: "user", content: "Hello there!" }];

  test("response_format: the model thinks freely, then its answer is JSON valid against the schema", async () => {
    const schema = {
      type: "object",
      properties: { mood: { type: "string" }, score: { type: "integer" } },
      required: ["mood", "score"],
      additionalProperties: false,
    };
    for (const [temperature, seed] of [
      [0, 1],
      [1, 2],
      [1, 3],
    ]) {
      const response = await completion("separate", {
        messages: hello,
        temperature,
        seed,
        response_format: { type: "json_schema", json_schema: { name: "mood", schema } },
      });
      const { choices } = (await response.json()) as ChatCompletion;
      const { message, finish_reason } = choices[0]!;
      expect({ temperature, seed, finish_reason }).toEqual({ temperature, seed, finish_reason: "stop" });
      expect(message.reasoning_content!.length).toBeGreaterThan(0);
      // The thought as ever; the answer is the JSON alone (its free strings may hold any text).
      expectNoMarkers(message.reasoning_content!);
      expect(message.content).toStartWith("{");
      const answer = JSON.parse(message.content!) as { mood: unknown; score: unknown };
      expect(Object.keys(answer)).toEqual(["mood", "score"]);
      expect([typeof answer.mood, Number.isInteger(answer.score)]).toEqual(["string", true]);
    }
  });

  test("reasoning_content beside the answer; streamed, as deltas before the content's", async () => {
    const response = await completion("separate", { messages: hello });
    expect(response.status).toBe(200);
    const { choices } = (await response.json()) as ChatCompletion;
    expect(choices[0]!.message).toEqual({
      role: "assistant",
      content: reference.message.content,
      refusal: null,
      reasoning_content: reference.message.reasoning,
    });

    const chunks = await completionChunks("separate", { messages: hello });
    const deltas = chunks.map((chunk) => chunk.choices[0]?.delta ?? {});
    const thought = deltas.flatMap((delta) => delta.reasoning_content ?? []);
    const answer = deltas.flatMap((delta) => delta.content || []);
    const lastThought = deltas.findLastIndex((delta) => delta.reasoning_content !== undefined);
    expect(lastThought).toBeLessThan(deltas.findIndex((delta) => (delta.content ?? "") !== ""));
    expect(thought.join("")).toBe(reference.message.reasoning!);
    expect(answer.join("")).toBe(reference.message.content);
    expect(deltas.every((delta) => delta.reasoning_content === undefined || delta.content === undefined)).toBe(true);
    expectNoMarkers(...thought, ...answer);
  });

  test("stop strings apply to the answer only: a word of the thought does not end the reply", async () => {
    const word = reference.message.reasoning!.split(" ")[0]!;
    const response = await completion("separate", { messages: hello, stop: [word] });
    const { choices } = (await response.json()) as ChatCompletion;
    const at = reference.message.content.indexOf(word);
    expect(choices[0]!.message).toEqual({
      role: "assistant",
      content: at < 0 ? reference.message.content : reference.message.content.slice(0, at),
      refusal: null,
      reasoning_content: reference.message.reasoning,
    });
    expect(choices[0]!.finish_reason).toBe("stop");
  });

  test("an assistant message's reasoning_content goes to the template with it", async () => {
    const messages = [...hello, { role: "assistant", content: "Hi.", reasoning_content: "They greet me." }, { role: "user", content: "And then?" }];
    expect((await completion("separate", { messages })).status).toBe(200);
    const { request, result } = modes.separate.generations.at(-1)!;
    expect(request.history[1]).toEqual({ role: "assistant", content: "Hi.", reasoning: "They greet me." });
    expect(result.prompt).toBe(rendered(messages));
  });
});

describe("the contract", () => {
  test("the reasoning event, the reply, the listing and OpenAI's bodies with their thought match the OpenAPI document", async () => {
    const document = (await (await fetch(`${modes.separate.served.url}/openapi.json`)).json()) as {
      paths: Record<string, { post: { responses: Record<string, { content: Record<string, { "x-events": Record<string, unknown> }> }> } }>;
    };
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats(ajv);
    ajv.addSchema(document as object, "openapi.json");
    const expectValid = (schema: string, body: unknown) => {
      const validate = ajv.getSchema(`openapi.json#/components/schemas/${schema}`)!;
      if (!validate(body)) throw new Error(`${schema} does not match the document: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(body)}`);
    };
    const events = await stream("separate", { message: "Hello there!", conversation_id: "documented", temperature: 0 });
    for (const event of events.filter((event) => event.event === "reasoning")) expectValid("ChatReasoning", event.data);
    expectValid("ChatReply", events.at(-1)!.data);
    const listing = await fetch(`${modes.separate.served.url}/api/v1.0/chat/messages?conversation_id=documented`, { headers: bearer(alice.key) });
    expectValid("MessagePage", await listing.json());
    const messages = [{ role: "user", content: "Hello there!" }];
    expectValid("ChatCompletion", await (await completion("separate", { messages })).json());
    for (const chunk of await completionChunks("separate", { messages })) expectValid("ChatCompletionChunk", chunk);
    expect(document.paths["/api/v1.0/chat"]!.post.responses["200"]!.content["text/event-stream"]!["x-events"].reasoning).toEqual({
      $ref: "#/components/schemas/ChatReasoning",
    });
  });
});

describe("PARLEY_REASONING=hide", () => {
  test("the same answer; the thought neither streamed, returned, stored nor listed", async () => {
    const plain = await chat("hide", { message: "Hello there!", conversation_id: "hidden", temperature: 0 });
    expect(plain.message.content).toBe(reference.message.content);
    expect(plain.message).not.toHaveProperty("reasoning");
    const events = await stream("hide", { message: "Hello there!", conversation_id: "hidden-stream", temperature: 0 });
    expect(events.map((event) => event.event)).not.toContain("reasoning");
    expect(contents(events, "delta").join("")).toBe(reference.message.content);
    expectNoMarkers(...contents(events, "delta"));
    for (const message of [...(await stored("hide", "hidden")), ...(await stored("hide", "hidden-stream"))]) expect(message).not.toHaveProperty("reasoning");

    const { choices } = (await (await completion("hide", { messages: [{ role: "user", content: "Hello there!" }] })).json()) as ChatCompletion;
    expect(choices[0]!.message).toEqual({ role: "assistant", content: reference.message.content, refusal: null });
  });
});

describe("PARLEY_REASONING=inline", () => {
  test("the reply's text as generated, markers and all, is the content; there is no reasoning", async () => {
    const plain = await chat("inline", { message: "Hello there!", conversation_id: "inline", temperature: 0 });
    expect(plain.message.content).toBe(`<think>\n${reference.message.reasoning}\n</think>\n\n${reference.message.content}`);
    expect(plain.message).not.toHaveProperty("reasoning");
    const events = await stream("inline", { message: "Hello there!", conversation_id: "inline-stream", temperature: 0 });
    expect(events.map((event) => event.event)).not.toContain("reasoning");
    expect(contents(events, "delta").join("")).toBe(plain.message.content);
  });
});
