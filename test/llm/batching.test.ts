import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Engine, GenerateRequest } from "../../src/llm/engine";
import { allowSlowTests, generated, testEngine } from "../support";

allowSlowTests();

// Sequences decoded in one batch must not change what any of them says: the batch shares the
// matrix work, never the sampling. On the demo model, whose attention weights are zero, that holds
// bit for bit. (On random-weight models llama.cpp's sums are not batch-invariant in their last
// bits, as in llama-server with several slots: a near-tie can then sample differently.)

const reply = async (engine: Engine, request: GenerateRequest): Promise<string> => (await generated(engine, request)).text;

const questions = ["hello there", "what is the weather like", "tell me about ships", "how are you today"];
let round = 0;
/** A fresh conversation per request: replies alone and together start from the same cache. */
const ask = (content: string, extra: Partial<GenerateRequest>): GenerateRequest => ({
  conversationKey: `batch-${++round}`,
  cacheScope: "test",
  history: [{ role: "user", content }],
  maxTokens: 24,
  temperature: 0,
  ...extra,
});

describe("four conversations decoded together", () => {
  let engine: Engine;
  beforeAll(async () => {
    engine = await testEngine({ parallel: 4 });
  });
  afterAll(async () => {
    await engine.close();
  });

  for (const [name, sampling] of [
    ["greedy", (): Partial<GenerateRequest> => ({})],
    ["seeded at temperature 1", (i: number): Partial<GenerateRequest> => ({ temperature: 1, seed: 1000 + i })],
  ] as const) {
    test(`${name}: each gets exactly the reply it gets alone`, async () => {
      const alone: string[] = [];
      for (const [i, question] of questions.entries()) alone.push(await reply(engine, ask(question, sampling(i))));
      const together = await Promise.all(questions.map((question, i) => reply(engine, ask(question, sampling(i)))));
      expect(together).toEqual(alone);
      expect(engine.stats()).toMatchObject({ busy: 0, queued: 0 });
    });
  }

  test("the replies differ from one another (so the comparison above can fail)", async () => {
    const replies = await Promise.all(questions.map((question, i) => reply(engine, ask(question, { temperature: 1, seed: i }))));
    expect(new Set(replies).size).toBeGreaterThan(1);
  });
});
