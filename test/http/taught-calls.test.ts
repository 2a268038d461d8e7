/**
 * The generated models learned tool calls in their family's syntax (src/gguf/call-replies.ts): a
 * call ends by itself where parallel calls are allowed, the demo offered tools sometimes calls of
 * its own accord, and a model offered none never opens a call, even with a client's bias on it.
 * Through the openai SDK; request seeds are fixed, so each reply is the same on every run.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import type { FamilyPreset } from "../../src/gguf/families";
import { readGgufHeader } from "../../src/gguf/reader";
import { allowSlowTests, presetModel, servedEngine } from "../support";

allowSlowTests();

const weather = {
  type: "function" as const,
  function: {
    name: "get_weather",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 24 } }, required: ["city"], additionalProperties: false },
  },
};
const time = {
  type: "function" as const,
  function: { name: "get_time", parameters: { type: "object", properties: { zone: { type: "string", maxLength: 16 } }, required: ["zone"] } },
};
const ask: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "What is the weather in Paris?" }];
const MAX_TOKENS = 120;

const clientOf = (app: ReturnType<typeof servedEngine>) => new OpenAI({ apiKey: app.key, baseURL: `${app.served.url}/v1`, maxRetries: 0 });

describe.each(["demo", "qwen2", "mistral", "gemma", "llama3"] as const)("%s, made to call with parallel calls allowed", (preset: "demo" | FamilyPreset) => {
  const app = servedEngine(`taught-${preset}`, { preset, parallel: 1 });

  test("the reply is calls that end by themselves, before max_tokens", async () => {
    const client = clientOf(app);
    for (const [temperature, seed] of [
      [0, 1],
      [1, 2],
      [1, 3],
      [1, 4],
    ] as const) {
      const completion = await client.chat.completions.create({
        model: "any",
        messages: ask,
        tools: [weather, time],
        tool_choice: "required",
        temperature,
        seed,
        max_tokens: MAX_TOKENS,
      });
      const { message, finish_reason } = completion.choices[0]!;
      expect(finish_reason, `seed ${seed}`).toBe("tool_calls");
      expect(message.tool_calls!.length).toBeLessThanOrEqual(2);
    }
  });
});

describe("the demo, offered tools it may call", () => {
  const app = servedEngine("taught-auto", { parallel: 1 });

  test("answers mostly in words, and now and then with a call that ends by itself", async () => {
    const client = clientOf(app);
    let calls = 0;
    let words = 0;
    for (let seed = 1; seed <= 100; seed++) {
      const completion = await client.chat.completions.create({
        model: "any",
        messages: ask,
        tools: [weather, time],
        tool_choice: "auto",
        temperature: 1,
        seed,
        max_tokens: MAX_TOKENS,
      });
      const { message, finish_reason } = completion.choices[0]!;
      expect(message.content ?? "").not.toContain("tool_call");
      if (message.tool_calls) {
        calls++;
        expect(finish_reason).toBe("tool_calls");
      } else words++;
    }
    expect(calls).toBeGreaterThan(0);
    expect(words).toBeGreaterThan(calls);
  });
});

describe.each(["demo", "qwen2"] as const)("%s, offered no tool to call", (preset) => {
  const app = servedEngine(`taught-none-${preset}`, { preset, parallel: 1 });
  let opener: number;
  beforeAll(async () => {
    const tokens = readGgufHeader(await presetModel(preset)).metadata["tokenizer.ggml.tokens"] as { items: readonly string[] };
    opener = tokens.items.indexOf("<tool_call>");
  });

  test("never writes a call's opener, even with a bias that would all but force it", async () => {
    const client = clientOf(app);
    expect(opener).toBeGreaterThan(0);
    for (const tools of [{}, { tools: [weather], tool_choice: "none" as const }]) {
      for (const seed of [1, 2, 3]) {
        const completion = await client.chat.completions.create({
          model: "any",
          messages: ask,
          ...tools,
          temperature: 1,
          seed,
          max_tokens: 20,
          logit_bias: { [opener]: 100 },
        });
        const { message } = completion.choices[0]!;
        expect(message.tool_calls).toBeUndefined();
        expect(message.content).not.toContain("<tool_call>");
      }
    }
  });
});
