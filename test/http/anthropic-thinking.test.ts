/**
 * Anthropic's extended thinking, spoken by the official @anthropic-ai/sdk to the `qwen3-thinking`
 * preset: the thought as a `thinking` block apart from the text, bounded by `budget_tokens` (its
 * close marker then forced, so the answer follows), none when disabled, its text left out when
 * omitted, thoughts sent back in the history, and `ping` events on the wire.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, bearer, readSse, rejection, type Served, type SseEvent, serveApp, testDb, testEngine } from "../support";

allowSlowTests();

/** Template text that must never reach a client as part of a block. */
const MARKERS = ["<think>", "</think>", "<|im_end|>", "<|im_start|>"];

const db = testDb("anthropic-thinking");
const alice = await db.keys.create("alice", "user");
let engine: Engine;
let served: Served;
let client: Anthropic;

const hello: Anthropic.MessageParam[] = [{ role: "user", content: "Hello" }];
/** Greedy: the SDK's types no longer name temperature, which Parley (and Anthropic's API) still take. */
const greedy = { temperature: 0 } as object;
const ask = (params: Partial<Anthropic.MessageCreateParamsNonStreaming>) =>
  client.messages.create({ model: "any", max_tokens: 80, messages: hello, ...greedy, ...params });
const blocksOf = <T extends Anthropic.ContentBlock["type"]>(message: Anthropic.Message, type: T) =>
  message.content.filter((block): block is Extract<Anthropic.ContentBlock, { type: T }> => block.type === type);

/** The unbounded reply: its whole thought, and its answer. */
let whole: { thought: string; answer: string; outputTokens: number };
/** Replies under budgets of 1 to 4 tokens, asked one at a time. */
const bounded = new Map<number, Anthropic.Message>();

beforeAll(async () => {
  engine = await testEngine({ preset: "qwen3-thinking", parallel: 2, contextSize: 1024 });
  served = serveApp({ storage: db.storage, engine });
  client = new Anthropic({ apiKey: alice.key, baseURL: served.url, maxRetries: 0 });
  const message = await ask({});
  whole = { thought: blocksOf(message, "thinking")[0]!.thinking, answer: blocksOf(message, "text")[0]!.text, outputTokens: message.usage.output_tokens };
  for (const budget of [1, 2, 3, 4]) bounded.set(budget, await ask({ thinking: { type: "enabled", budget_tokens: budget } }));
});

const thoughtOf = (message: Anthropic.Message) => blocksOf(message, "thinking")[0]!.thinking;
afterAll(async () => {
  await served.stop();
  await engine.close();
  await db.storage.close();
});

describe("thinking blocks", () => {
  test("without thinking, the model thinks as it would: the thought first, apart from the text, no marker in either", async () => {
    const message = await ask({});
    expect(message.content.map((block) => block.type)).toEqual(["thinking", "text"]);
    expect(message.content[0]).toEqual({ type: "thinking", thinking: whole.thought, signature: "" });
    expect(whole.thought.split(" ").length).toBeGreaterThan(3);
    expect(whole.answer.length).toBeGreaterThan(0);
    for (const marker of MARKERS) expect(JSON.stringify(message.content)).not.toContain(marker);
    expect(message.stop_reason).toBe("end_turn");
    // adaptive lets the model decide: the same.
    expect((await ask({ thinking: { type: "adaptive" } })).content).toEqual(message.content);
  });

  test("budget_tokens bounds the thought, token for token; its close is forced and the same answer follows", async () => {
    const first = bounded.get(1)!;
    for (const [budget, message] of bounded) {
      expect(message.content.map((block) => block.type)).toEqual(["thinking", "text"]);
      expect(whole.thought.startsWith(thoughtOf(message))).toBe(true);
      expect(blocksOf(message, "text")[0]!.text).toBe(whole.answer);
      expect(message.stop_reason).toBe("end_turn");
      // Each token more of budget is one token more of thought: the open marker, the thought, the forced close, the answer.
      expect(message.usage.output_tokens).toBe(first.usage.output_tokens + budget - 1);
      if (budget > 1) expect(thoughtOf(message).length).toBeGreaterThan(thoughtOf(bounded.get(budget - 1)!).length);
    }
    expect(thoughtOf(first).split(" ")).toHaveLength(1);
    expect(first.usage.output_tokens).toBeLessThan(whole.outputTokens);
    // A budget the thought does not reach changes nothing.
    const roomy = await ask({ thinking: { type: "enabled", budget_tokens: 60 } });
    expect(roomy.content).toEqual((await ask({})).content);
  });

  test("concurrent replies each keep their own budget (replies batched together)", async () => {
    const budgets = [1, 2, 3, 4, 1, 2, 3, 4];
    const messages = await Promise.all(budgets.map((budget) => ask({ thinking: { type: "enabled", budget_tokens: budget } })));
    for (const [i, message] of messages.entries()) {
      expect(message.content).toEqual(bounded.get(budgets[i]!)!.content);
      expect(message.usage.output_tokens).toBe(bounded.get(budgets[i]!)!.usage.output_tokens);
    }
  });

  test("disabled: no thought at all (closed as it opens), the same answer", async () => {
    const message = await ask({ thinking: { type: "disabled" } });
    expect(message.content).toEqual([{ type: "text", text: whole.answer, citations: null }]);
    expect(message.usage.output_tokens).toBe(bounded.get(1)!.usage.output_tokens - 1);
  });

  test("display omitted: the thinking block is there, its text is not", async () => {
    const message = await ask({ thinking: { type: "enabled", budget_tokens: 2, display: "omitted" } });
    expect(message.content).toEqual([{ type: "thinking", thinking: "", signature: "" }, blocksOf(bounded.get(2)!, "text")[0]!]);
    expect(message.usage.output_tokens).toBe(bounded.get(2)!.usage.output_tokens);
  });

  test("a forced tool call after a bounded thought: the grammar takes the forced close, the input is valid", async () => {
    const message = await ask({
      max_tokens: 300,
      thinking: { type: "enabled", budget_tokens: 2 },
      // An enum, and one call, end where the grammar says: a bigram model never wants to end a free string or its calls.
      tools: [
        { name: "get_weather", input_schema: { type: "object", properties: { unit: { enum: ["c", "f"] } }, required: ["unit"], additionalProperties: false } },
      ],
      tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true },
    });
    expect(message.stop_reason).toBe("tool_use");
    expect(thoughtOf(message)).toBe(thoughtOf(bounded.get(2)!));
    const call = blocksOf(message, "tool_use")[0]!;
    expect(["c", "f"]).toContain((call.input as { unit: string }).unit);
    expect(Object.keys(call.input as object)).toEqual(["unit"]);
  });

  test("a budget of max_tokens or more, or a thought of another service, is BadRequestError naming it", async () => {
    const budget = await rejection(ask({ max_tokens: 16, thinking: { type: "enabled", budget_tokens: 16 } }));
    expect(budget).toBeInstanceOf(Anthropic.BadRequestError);
    expect((budget as Error).message).toContain("thinking.budget_tokens");
    const redacted = await rejection(
      ask({
        messages: [
          ...hello,
          {
            role: "assistant",
            content: [
              { type: "redacted_thinking", data: "opaque" },
              { type: "text", text: "Hi" },
            ],
          },
          { role: "user", content: "Again" },
        ],
      }),
    );
    expect(redacted).toBeInstanceOf(Anthropic.BadRequestError);
    expect((redacted as Error).message).toContain("messages[1].content[0]");
  });
});

describe("streamed", () => {
  test("the thinking block's deltas, then the text's; the final message is them together", async () => {
    const stream = client.messages.stream({ model: "any", max_tokens: 80, messages: hello, ...greedy, thinking: { type: "enabled", budget_tokens: 3 } });
    let thought = "";
    let text = "";
    stream.on("thinking", (delta) => (thought += delta));
    stream.on("text", (delta) => (text += delta));
    const final = await stream.finalMessage();
    expect(final.content.map((block) => block.type)).toEqual(["thinking", "text"]);
    expect(final.content[0]).toEqual({ type: "thinking", thinking: thoughtOf(bounded.get(3)!), signature: "" });
    expect(final.content[1]).toMatchObject({ type: "text", text: whole.answer });
    expect(thought).toBe(thoughtOf(bounded.get(3)!));
    expect(text).toBe(whole.answer);
    expect(final.usage.output_tokens).toBe(bounded.get(3)!.usage.output_tokens);
  });

  test("on the wire: message_start, then ping, then the blocks in order, each started and stopped", async () => {
    const response = await fetch(`${served.url}/v1/messages`, {
      method: "POST",
      headers: { ...bearer(alice.key), "content-type": "application/json" },
      body: JSON.stringify({
        model: "any",
        max_tokens: 80,
        messages: hello,
        temperature: 0,
        stream: true,
        thinking: { type: "enabled", budget_tokens: 2, display: "omitted" },
      }),
    });
    expect(response.status).toBe(200);
    const events: SseEvent[] = [];
    for await (const event of readSse(response)) if (event.event !== "comment") events.push(event);
    expect(events.slice(0, 5).map((event) => event.event)).toEqual([
      "message_start",
      "ping",
      "content_block_start",
      "content_block_stop",
      "content_block_start",
    ]);
    expect(events[1]!.data).toEqual({ type: "ping" });
    expect(events[2]!.data).toEqual({ type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "", signature: "" } });
    // Omitted: no thinking_delta; the thought's block stops before the text's starts.
    expect(events[3]!.data).toEqual({ type: "content_block_stop", index: 0 });
    expect(events[4]!.data).toMatchObject({ type: "content_block_start", index: 1, content_block: { type: "text" } });
    expect(JSON.stringify(events)).not.toContain("thinking_delta");
  });
});

describe("the history", () => {
  test("a thought sent back with its tool call reaches the template, which shows it after the last question", async () => {
    const tools: Anthropic.Tool[] = [{ name: "get_weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }];
    const turns = (thought: Anthropic.ThinkingBlockParam[]): Anthropic.MessageParam[] => [
      { role: "user", content: "What is the weather in Paris?" },
      { role: "assistant", content: [...thought, { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "Sunny" }] },
    ];
    const bare = await client.messages.countTokens({ model: "any", tools, messages: turns([]) });
    const withThought = await client.messages.countTokens({
      model: "any",
      tools,
      messages: turns([{ type: "thinking", thinking: "Paris needs a lookup first", signature: "" }]),
    });
    expect(withThought.input_tokens).toBeGreaterThan(bare.input_tokens + 3);
  });

  test("a thinking block in a user message is refused, naming it", async () => {
    const refusal = await rejection(
      ask({ messages: [{ role: "user", content: [{ type: "thinking", thinking: "hmm", signature: "" } as unknown as Anthropic.TextBlockParam] }] }),
    );
    expect(refusal).toBeInstanceOf(Anthropic.BadRequestError);
    expect((refusal as Error).message).toContain("messages[0].content[0]");
  });
});
