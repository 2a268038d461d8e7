/**
 * A conversation whose history outgrows the context (PARLEY_CONTEXT_OVERFLOW): `shift` drops the
 * oldest turns' cells and evaluates only the new turn, keeping the system prompt first and the
 * prompt's text what a fresh evaluation of the same window reads; `slack` and `exact` give, at
 * temperature 0, the reply a fresh engine gives the same window, token for token, `slack`
 * evaluating the whole window only once in several turns.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Engine, type GenerateResult, type Turn } from "../../src/llm/engine";
import { allowSlowTests, generated, presetModel, tempDir, testEngine } from "../support";

allowSlowTests();

const SYSTEM = "Answer in one short line.";
const TURNS = 14;

const run = generated;

/** A conversation of `TURNS` turns on `engine` under one key; each turn's result. `between` runs after each turn. */
async function converse(engine: Engine, key: string, between?: (t: number) => Promise<unknown>): Promise<{ history: Turn[]; results: GenerateResult[] }> {
  const history: Turn[] = [{ role: "system", content: SYSTEM }];
  const results: GenerateResult[] = [];
  for (let t = 1; t <= TURNS; t++) {
    history.push({ role: "user", content: `turn ${t}: tell me about the sea, the hills and the long road home` });
    const result = await run(engine, { conversationKey: key, cacheScope: "user", publicTurns: 1, history: [...history], temperature: 0, maxTokens: 16 });
    history.push({ role: "assistant", content: result.text });
    results.push(result);
    await between?.(t);
  }
  return { history, results };
}

/** The turns past the first overflow that evaluated more than a new turn's worth: the window was cut and evaluated afresh. */
function cutsOf(results: readonly GenerateResult[]): number {
  const first = overflowAt(results);
  const newTurn = results[1]!.promptTokens - results[0]!.promptTokens;
  return results.filter((result, t) => t >= first && result.promptTokens - result.cachedTokens > newTurn + 8).length;
}

/** The first turn whose prompt reuses less than the whole previous prompt: the window moved. */
const overflowAt = (results: readonly GenerateResult[]) => results.findIndex((result, t) => t > 0 && result.cachedTokens < results[t - 1]!.promptTokens);

describe("a conversation past the context", () => {
  let shifting: Engine;
  let slack: Engine;
  let exact: Engine;
  let fresh: Engine;
  beforeAll(async () => {
    [shifting, slack, exact, fresh] = await Promise.all([
      testEngine({ preset: "demo", parallel: 1, contextSize: 256, contextOverflow: "shift" }),
      testEngine({ preset: "demo", parallel: 1, contextSize: 256, contextOverflow: "slack", contextSlack: 0.4 }),
      testEngine({ preset: "demo", parallel: 1, contextSize: 256, contextOverflow: "exact" }),
      testEngine({ preset: "demo", parallel: 1, contextSize: 256 }),
    ]);
  });
  afterAll(async () => {
    await Promise.all([shifting.close(), slack.close(), exact.close(), fresh.close()]);
  });

  /** Asks `fresh` for the reply to `history` and expects `result`'s prompt and reply, token for token. */
  async function expectFresh(history: Turn[], result: GenerateResult, key: string) {
    const again = await run(fresh, { conversationKey: key, cacheScope: "user", publicTurns: 1, history, temperature: 0, maxTokens: 16 });
    expect(again.prompt).toBe(result.prompt);
    expect(again.text).toBe(result.text);
    expect(again.completionTokens).toBe(result.completionTokens);
  }

  test("shift: a turn past the context evaluates about its new turn only, the system prompt first, the prompt reading as a fresh one would", async () => {
    const { results } = await converse(shifting, "shifted");
    const { results: exactly } = await converse(exact, "exactly");
    const first = overflowAt(results);
    expect(first).toBeGreaterThan(1);
    expect(overflowAt(exactly)).toBe(first);
    let compared = 0;
    for (const [t, result] of results.entries()) {
      // The window's first turn is always the system prompt.
      expect(result.prompt.indexOf(`<|im_start|>system\n${SYSTEM}`)).toBe(result.prompt.indexOf("<|im_start|>"));
      expect(["stop", "length"]).toContain(result.finishReason);
      if (t < first) continue;
      // What it evaluated: about the new user turn (and the reply's closing), not the window.
      expect(result.promptTokens - result.cachedTokens).toBeLessThan(results[0]!.promptTokens);
      // While both said the same so far, the shifted prompt reads as the exact one, token for token.
      if (results.slice(0, t).every((earlier, i) => earlier.text === exactly[i]!.text)) {
        expect(result.prompt).toBe(exactly[t]!.prompt);
        compared++;
      }
    }
    expect(compared).toBeGreaterThan(0);
    // Exact mode re-evaluated the window: far more than the new turn.
    expect(exactly.at(-1)!.promptTokens - exactly.at(-1)!.cachedTokens).toBeGreaterThan(results[0]!.promptTokens);
  });

  test("exact: each turn past the context gets the reply a fresh engine gives the same history, token for token", async () => {
    const { history, results } = await converse(exact, "exact-vs-fresh");
    const first = overflowAt(results);
    expect(first).toBeGreaterThan(1);
    // The history as it stood at turn t: everything before its reply.
    for (let t = first; t < TURNS; t++) await expectFresh(history.slice(0, 2 + 2 * t), results[t]!, `fresh-${t}`);
  });

  test("slack: a cut leaves room for the turns after it, which evaluate only their new part; every reply is a fresh engine's for the same window, token for token", async () => {
    const { history, results } = await converse(slack, "slack");
    const first = overflowAt(results);
    expect(first).toBeGreaterThan(1);
    const cuts = cutsOf(results);
    // The first overflow cuts; the turns after it fit in the room it left, until the next cut.
    expect(cuts).toBeGreaterThan(0);
    expect(cuts).toBeLessThan((TURNS - first) / 2);
    for (let t = first; t < TURNS; t++) {
      // The window starts at the first user turn its prompt shows ("turn N: ..."), after the system prompt.
      const opens = Number(/turn (\d+):/.exec(results[t]!.prompt)![1]);
      expect(opens).toBeGreaterThan(1);
      await expectFresh([history[0]!, ...history.slice(1 + 2 * (opens - 1), 2 + 2 * t)], results[t]!, `slack-fresh-${t}`);
    }
  });

  test("slack: a conversation whose sequence another took comes back from its saved state and keeps its window", async () => {
    await using saving = await Engine.load({
      modelPath: await presetModel("demo"),
      parallel: 1,
      contextSize: 256,
      threads: 1,
      contextOverflow: "slack",
      kvCache: { dir: tempDir("slack-kv"), maxBytes: 64 * 2 ** 20 },
    });
    // After each turn another conversation takes the only sequence: the next turn loads the saved state.
    const other = (t: number) =>
      run(saving, { conversationKey: `other-${t}`, cacheScope: "user", history: [{ role: "user", content: "hello" }], temperature: 0, maxTokens: 4 });
    const { results } = await converse(saving, "slack-saved", other);
    const { results: inMemory } = await converse(slack, "slack-in-memory");
    expect(results.map((result) => result.text)).toEqual(inMemory.map((result) => result.text));
    expect(results.map((result) => result.prompt)).toEqual(inMemory.map((result) => result.prompt));
    // Loaded from disk, the window's start was found again: as few cuts as in memory (without the
    // saved state, every turn would evaluate its whole window).
    expect(cutsOf(results)).toBe(cutsOf(inMemory));
    expect(cutsOf(results)).toBeLessThan((TURNS - overflowAt(results)) / 2);
  });
});
