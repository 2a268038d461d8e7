import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { getLlama, type Llama, type LlamaModel, resolveChatWrapper } from "node-llama-cpp";
import { InvalidInput } from "../../src/errors";
import { PromptRenderer } from "../../src/llm/prompt";
import { TemplateChat } from "../../src/llm/template-chat";
import { cachingTokenizers } from "../../src/llm/token-cache";
import type { Turn } from "../../src/llm/types";
import { allowSlowTests, presetModel, type Random, rejection, withSeed } from "../support";

allowSlowTests();

let llama: Llama;
let model: LlamaModel;
let prompts: PromptRenderer;

beforeAll(async () => {
  llama = await getLlama({ gpu: false, build: "never" });
  model = await llama.loadModel({ modelPath: await presetModel("demo"), vocabOnly: true });
  prompts = new PromptRenderer(model, resolveChatWrapper(model), TemplateChat.of(model));
});
afterAll(() => llama.dispose());

/** Text of every kind a tokenizer handles differently: words, CJK, emoji, accents, runs of spaces, control tokens as text. */
function mixedText(random: Random, length: number): string {
  const kinds = [
    () => " hello",
    () => " the",
    () => String.fromCharCode(random.int(0x4e00, 0x9fff)),
    () => "👋🏽",
    () => "é",
    () => " ".repeat(random.int(1, 8)),
    () => "<|im_end|>",
    () => "\n",
  ];
  let text = "";
  while (text.length < length) text += kinds[random.int(0, kinds.length - 1)]!();
  return text.slice(0, length);
}

describe("cachingTokenizer", () => {
  test(
    "rendered conversations tokenize as with the model's tokenizer, remembered, evicted or new",
    withSeed(async (random) => {
      const wrapper = resolveChatWrapper(model);
      for (const capacity of [0, 50, 1 << 20]) {
        const tokenizer = cachingTokenizers(model.tokenizer, capacity)("a user");
        for (let round = 0; round < 3; round++) {
          const history = Array.from({ length: random.int(1, 6) }, (_, i) =>
            i % 2 === 0
              ? { type: "user" as const, text: mixedText(random, random.int(0, 300)) }
              : { type: "model" as const, response: [mixedText(random, random.int(0, 300))] },
          );
          const text = wrapper.generateContextState({ chatHistory: history }).contextText;
          const expected = text.tokenize(model.tokenizer);
          expect(text.tokenize(tokenizer)).toEqual(expected);
          expect(text.tokenize(tokenizer)).toEqual(expected);
          expect(text.tokenize(tokenizer, "trimLeadingSpace")).toEqual(text.tokenize(model.tokenizer, "trimLeadingSpace"));
        }
      }
    }),
  );
});

test("a scope finds only what it tokenized itself: another user's text is tokenized anew", () => {
  let calls = 0;
  const counting = Object.assign(
    ((...args: Parameters<typeof model.tokenizer>) => (calls++, model.tokenizer(...args))) as typeof model.tokenizer,
    model.tokenizer,
  );
  const tokenizers = cachingTokenizers(counting, 1 << 20);
  const text = "a message only its sender has sent";
  const alice = tokenizers("alice")(text);
  expect(tokenizers("alice")(text)).toBe(alice);
  expect(calls).toBe(1);
  expect(tokenizers("bob")(text)).toEqual(alice);
  expect(calls).toBe(2);
});

describe("PromptRenderer", () => {
  test(
    "history of historyChars(n) characters is more than n tokens, even spelled with the longest tokens",
    withSeed(async (random) => {
      const pieces = model.fileInfo.metadata.tokenizer.ggml.tokens as string[];
      const longest = pieces.map((_, token) => model.detokenize([token as never], false)).sort((a, b) => b.length - a.length)[0]!;
      for (const n of [1, 100, 2_000]) {
        const chars = prompts.historyChars(n);
        for (const text of [longest.repeat(Math.ceil(chars / longest.length)), mixedText(random, chars)]) {
          expect(model.tokenize(text.slice(0, chars), false).length).toBeGreaterThan(n);
        }
      }
    }),
  );

  test(
    "a fitted prompt is its newest turns, tokenized as the model does, within the budget and historyChars",
    withSeed(async (random) => {
      // Turns of at most 100 characters (300 tokens) fit whole: the window is made of turns, none cut.
      const budget = 400;
      const history: Turn[] = [];
      for (let i = 0; i < 61; i++) history.push({ role: i % 2 === 0 ? "user" : "assistant", content: mixedText(random, random.int(1, 100)) });
      const fitted = await prompts.fit(history, budget, "a user");
      expect(fitted.tokens.length).toBeLessThanOrEqual(budget);
      expect(fitted.tokens).toEqual(fitted.text.tokenize(model.tokenizer));

      const kept = history.slice(-fitted.turns.length);
      expect(kept[0]!.role).toBe("user");
      expect(fitted.turns).toEqual(kept);
      expect(kept.reduce((chars, turn) => chars + turn.content.length, 0)).toBeLessThan(prompts.historyChars(budget));
    }),
  );

  test(
    "with tools: the template's rendering, tokenized run by run as the model tokenizes it whole (special tokens' texts parsed), within the budget",
    withSeed(async (random) => {
      const tools = [{ name: "lookup", description: "Looks a word up", parameters: { type: "object", properties: { word: { type: "string" } } } }];
      for (const budget of [500, 800, 2000]) {
        const history: Turn[] = [];
        for (let i = 0; i < 30; i++) {
          history.push({ role: "user", content: mixedText(random, random.int(1, 100)) });
          const call = { id: `call_${i}`, name: "lookup", arguments: JSON.stringify({ word: mixedText(random, random.int(1, 10)) }) };
          if (random.next() < 0.3)
            history.push({ role: "assistant", content: "", toolCalls: [call] }, { role: "tool", content: mixedText(random, 20), toolCallId: call.id });
          history.push({ role: "assistant", content: mixedText(random, random.int(1, 100)) });
        }
        history.push({ role: "user", content: mixedText(random, random.int(1, 100)) });
        const fitted = await prompts.fit(history, budget, "a user", tools);
        expect(fitted.tokens.length).toBeLessThanOrEqual(budget);
        expect(fitted.tokens).toEqual(fitted.text.tokenize(model.tokenizer));
        expect(fitted.turns.at(-1)!.role).toBe("user");
      }
      // Tools are shown whole: where they alone outgrow the budget, no prompt is made.
      const refused = await rejection(prompts.fit([{ role: "user", content: "Hi" }], 100, "a user", tools));
      expect(refused).toBeInstanceOf(InvalidInput);
      expect((refused as InvalidInput).param).toBe("tools");
    }),
  );
});
