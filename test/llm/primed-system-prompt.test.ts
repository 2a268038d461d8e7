/**
 * The operator's system prompt evaluated ahead into every sequence (`primedTurns`): a new
 * conversation's first turn reuses it, whoever's it is; a conversation under another system prompt
 * reuses none of it and gets the reply an unprimed engine gives.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Engine, GenerateResult, Turn } from "../../src/llm/engine";
import { allowSlowTests, generated, testEngine } from "../support";

allowSlowTests();

const PRIMED = `You are the harbour's guide. ${"Speak of tides, boats, nets and the weather over the sea. ".repeat(12)}`;
const OTHER = `Mountain guide here. ${"Speak of paths, rocks, snow and the weather over the hills. ".repeat(12)}`;

async function firstTurn(engine: Engine, key: string, scope: string, system: string): Promise<GenerateResult> {
  const history: Turn[] = [
    { role: "system", content: system },
    { role: "user", content: "Where do I start?" },
  ];
  return generated(engine, { conversationKey: key, cacheScope: scope, publicTurns: 1, history, temperature: 0, maxTokens: 12 });
}

describe("a system prompt primed at load", () => {
  let primed: Engine;
  let plain: Engine;
  beforeAll(async () => {
    [primed, plain] = await Promise.all([
      testEngine({ preset: "demo", parallel: 2, contextSize: 1024, primedTurns: [{ role: "system", content: PRIMED }] }),
      testEngine({ preset: "demo", parallel: 2, contextSize: 1024 }),
    ]);
  });
  afterAll(async () => {
    await Promise.all([primed.close(), plain.close()]);
  });

  test("new conversations of two users reuse it on both sequences at once, and answer as without it", async () => {
    const [first, second] = await Promise.all([firstTurn(primed, "a", "alice", PRIMED), firstTurn(primed, "b", "bob", PRIMED)]);
    const unprimed = await firstTurn(plain, "a", "alice", PRIMED);
    for (const result of [first, second]) {
      // All of the system turn: only the user's turn (some 20 tokens) is evaluated.
      expect(result.cachedTokens).toBeGreaterThan(unprimed.promptTokens - 30);
      expect(result.text).toBe(unprimed.text);
    }
    expect(unprimed.cachedTokens).toBe(0);
  });

  test("under another system prompt nothing of it is reused, and the reply is an unprimed engine's", async () => {
    const other = await firstTurn(primed, "c", "carol", OTHER);
    const unprimed = await firstTurn(plain, "c", "carol", OTHER);
    // At most the template's opening before the system text, which any prompt shares.
    expect(other.cachedTokens).toBeLessThan(8);
    expect(other.text).toBe(unprimed.text);
    expect(other.prompt).toBe(unprimed.prompt);
  });
});
