/**
 * Property: whatever the order of users, prompts and sequences, a request's cached tokens never
 * exceed the opening every prompt shares, unless an earlier request of its own user sent that
 * prefix. Messages come from three words, so prompts of different users share long prefixes.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { getLlama, type Llama, type LlamaModel, type Token } from "node-llama-cpp";
import { Engine, type GenerateRequest, type GenerateResult } from "../../src/llm/engine";
import { sharedPrefix } from "../../src/llm/prompt";
import { allowSlowTests, generated, presetModel, testSeed } from "../support";

allowSlowTests();

let engine: Engine;
let llama: Llama;
let vocab: LlamaModel;

beforeAll(async () => {
  const modelPath = await presetModel("demo");
  engine = await Engine.load({ modelPath, contextSize: 1024, parallel: 2, threads: 1 });
  llama = await getLlama({ gpu: false, build: "never" });
  vocab = await llama.loadModel({ modelPath, vocabOnly: true });
});
afterAll(async () => {
  await engine.close();
  await vocab.dispose();
});

const run = (request: GenerateRequest): Promise<GenerateResult> => generated(engine, request);

const request = fc.record({
  user: fc.integer({ min: 0, max: 2 }),
  // A conversation of the user's (its key is the user's own), or a stateless prompt.
  conversation: fc.option(fc.integer({ min: 0, max: 1 }), { nil: undefined }),
  words: fc.array(fc.constantFrom("red", "blue", "green"), { minLength: 1, maxLength: 6 }),
});

describe("KV reuse across users", () => {
  test("cached tokens never exceed the shared opening unless the same user sent the prefix", async () => {
    const ask = (scope: string, content: string, key?: string) =>
      run({ cacheScope: scope, conversationKey: key, history: [{ role: "user", content }], temperature: 0, maxTokens: 2 });
    const tokensOf = (result: GenerateResult): Token[] => {
      const tokens = vocab.tokenize(result.prompt, true);
      expect(tokens.length).toBe(result.promptTokens);
      return tokens;
    };
    const opening = sharedPrefix(tokensOf(await ask("probe", "red")), tokensOf(await ask("probe", "blue")));
    expect(opening).toBeGreaterThan(0);
    const seen = { ownReuse: 0, openingReuse: 0 };
    // Every request so far, of every run: the engine keeps its sequences from one run to the next.
    const sent: { user: number; tokens: Token[] }[] = [];
    await fc.assert(
      fc.asyncProperty(fc.array(request, { minLength: 4, maxLength: 10 }), async (requests) => {
        for (const { user, conversation, words } of requests) {
          const result = await ask(`user-${user}`, words.join(" "), conversation === undefined ? undefined : `${user}-${conversation}`);
          const tokens = tokensOf(result);
          const own = Math.max(0, ...sent.filter((earlier) => earlier.user === user).map((earlier) => sharedPrefix(tokens, earlier.tokens)));
          expect(result.cachedTokens).toBeLessThanOrEqual(Math.max(opening, own));
          if (result.cachedTokens > opening) seen.ownReuse++;
          if (result.cachedTokens === opening) seen.openingReuse++;
          sent.push({ user, tokens });
        }
      }),
      { numRuns: 20, seed: testSeed },
    );
    // Neither bound is idle: users reused their own prefixes, and the opening was shared.
    expect(seen.ownReuse).toBeGreaterThan(0);
    expect(seen.openingReuse).toBeGreaterThan(0);
  });
});
