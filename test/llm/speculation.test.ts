/**
 * Speculative decoding (PARLEY_SPECULATE): replies' steps verify tokens guessed from their own
 * sequence, and the sampler keeps only the guesses it samples itself, so each token is the
 * sampler's draw from the logits after the reply so far, as without drafts. Those logits come from
 * a batch of several tokens, and llama.cpp's kernels for one token and for several round
 * differently: where a greedy reply's two most likely tokens are tied within that rounding, a
 * reply with drafts may take the other one. The generated bigram models' logits are far enough
 * apart that the kernels agree on every choice: there, the replies must match token for token.
 * The F16 vision model's random weights give near-tied logits: there, a reply must match, or first
 * differ by taking the second most likely token where it trails the first by less than EPSILON,
 * which a wrong acceptance (a guess kept that the sampler did not draw) would not. Skipped without
 * compiled natives, as test/llm/decode-steps.test.ts.
 */
import { describe, expect, test } from "bun:test";
import { getLlama, type Token } from "node-llama-cpp";
import { FAMILY_PRESETS } from "../../src/gguf/families";
import type { ModelPreset } from "../../src/gguf/presets";
import type { Engine, GenerateRequest, GenerateResult } from "../../src/llm/engine";
import type { Speculate } from "../../src/llm/types";
import { allowSlowTests, compiledNatives, generated, presetModel, testEngine } from "../support";

allowSlowTests();

const natives = await compiledNatives();

const QUESTIONS = ["tell me about the ships and the sea", "what is the weather like"];

/** The model's end-of-generation tokens: banned, its greedy replies run on into cycles instead of ending after a sentence. */
async function endTokens(preset: ModelPreset): Promise<number[]> {
  const model = await (await getLlama({ gpu: false, build: "never" })).loadModel({ modelPath: await presetModel(preset) });
  try {
    return Array.from(model.fileInfo.metadata.tokenizer.ggml.tokens.keys()).filter((token) => model.isEogToken(token as Token));
  } finally {
    await model.dispose();
  }
}

const ask = (content: string, ends: readonly number[], temperature: number, seed?: number): GenerateRequest => ({
  conversationKey: `spec-${content}-${seed ?? 0}`,
  cacheScope: "u",
  history: [{ role: "user", content }],
  maxTokens: 96,
  temperature,
  logitBias: Object.fromEntries(ends.map((token) => [token, -100])),
  ...(seed === undefined ? {} : { seed }),
});

/**
 * Each request's reply (and its text and tokens), asked together (else one after another) on an
 * engine of `preset` that speculates as `speculate` (from `draftModel`'s guesses, where given),
 * and its drafts' counts.
 */
async function replies(
  preset: ModelPreset,
  speculate: Speculate,
  requests: readonly GenerateRequest[],
  { draftModel, together = true }: { draftModel?: ModelPreset; together?: boolean } = {},
) {
  const drafts = { drafted: 0, accepted: 0 };
  const engine: Engine = await testEngine({
    preset,
    speculate,
    ...(draftModel ? { draftModelPath: await presetModel(draftModel) } : {}),
    parallel: together ? requests.length : 1,
    onDrafts: (drafted, accepted) => {
      drafts.drafted += drafted;
      drafts.accepted += accepted;
    },
  });
  try {
    const results: GenerateResult[] = [];
    if (together) results.push(...(await Promise.all(requests.map((request) => generated(engine, request)))));
    else for (const request of requests) results.push(await generated(engine, request));
    return { results, texts: results.map(({ text, completionTokens }) => ({ text, completionTokens })), drafts };
  } finally {
    await engine.close();
  }
}

/**
 * How far apart in log-probability a greedy reply's two best tokens may be where a reply with
 * drafts takes the second: twice the largest gap that a verification batch's rounding can flip on
 * the vision model, a tenth of the median gap between its two best tokens (docs/performance.md).
 */
const EPSILON = 1e-3;

/**
 * Where `text` first departs from the greedy `reference` (asked with its top 2 log-probabilities),
 * or undefined where it does not: the reference's token there, whether `text` goes on with the
 * second most likely token instead, and how far apart the two are.
 */
function departure(reference: GenerateResult, text: string) {
  if (text === reference.text) return undefined;
  const entries = reference.logprobs!;
  const bytes = new TextEncoder().encode(text);
  const startsAt = (at: number, spelled: readonly number[]) => spelled.every((byte, i) => bytes[at + i] === byte);
  let at = 0;
  let index = 0;
  while (index < entries.length && startsAt(at, entries[index]!.bytes)) at += entries[index++]!.bytes.length;
  const entry = entries[index]!;
  const [first, second] = entry.top;
  return {
    index,
    greedy: entry.token === first!.token && entry.logprob === first!.logprob,
    tookSecond: startsAt(at, second!.bytes),
    gap: first!.logprob - second!.logprob,
  };
}

describe.skipIf(natives === undefined)("speculative decoding (compiled natives)", () => {
  for (const preset of ["demo", ...FAMILY_PRESETS] as const) {
    test(`${preset}: at temperature 0 a reply with drafts is token for token the one without, alone and beside another`, async () => {
      const ends = await endTokens(preset);
      for (const questions of [QUESTIONS.slice(0, 1), QUESTIONS]) {
        const requests = questions.map((question) => ask(question, ends, 0));
        const off = await replies(preset, "off", requests);
        const on = await replies(preset, "lookup", requests);
        expect(off.drafts.drafted).toBe(0);
        // The drafts were verified, and some were right: the test would see a wrong acceptance.
        expect(on.drafts.accepted).toBeGreaterThan(0);
        expect(on.texts).toEqual(off.texts);
      }
    }, 60_000);
  }

  test("vision (F16, near-tied logits): a greedy reply with drafts is the one without, or first departs where its two best tokens are within EPSILON", async () => {
    const ends = await endTokens("vision");
    const questions = ["what is the weather like", "how do I bake bread", "describe a forest at night", QUESTIONS[0]!];
    const requests = questions.map((question) => ({ ...ask(question, ends, 0), maxTokens: 200 }));
    const reference = (
      await replies(
        "vision",
        "off",
        requests.map((request) => ({ ...request, logprobs: 2 })),
        { together: false },
      )
    ).results;
    for (const result of reference) expect(result.logprobs!.flatMap((entry) => entry.bytes)).toEqual([...new TextEncoder().encode(result.text)]);
    // Replies asking for log-probabilities are not stepped natively: they are the replies without drafts all the same.
    expect((await replies("vision", "off", requests, { together: false })).texts.map(({ text }) => text)).toEqual(reference.map(({ text }) => text));
    for (const [speculate, together] of [
      ["lookup", false],
      ["auto", false],
      ["lookup", true],
    ] as const) {
      const on = await replies("vision", speculate, requests, { together });
      expect(on.drafts.accepted).toBeGreaterThan(0);
      on.results.forEach((result, i) => {
        const departed = departure(reference[i]!, result.text);
        if (departed === undefined) return;
        const seen = { speculate, together, question: questions[i], ...departed, nearTied: departed.gap < EPSILON };
        expect(seen).toEqual({ ...seen, greedy: true, tookSecond: true, nearTied: true });
      });
    }
    // A reply that departs for a reason, as one with a wrong guess kept would: a sampled one is told apart.
    const sampled = (await replies("vision", "off", [ask(questions[0]!, ends, 1, 31)])).results[0]!;
    const departed = departure(reference[0]!, sampled.text);
    expect(departed).toBeDefined();
    expect(departed!.tookSecond && departed!.gap < EPSILON).toBe(false);
  }, 60_000);

  test("a reply held to a JSON schema drafts too: its grammar takes only the tokens the sampler keeps, and the reply is the one without drafts", async () => {
    const ends = await endTokens("demo");
    const schema = {
      type: "object",
      properties: { note: { type: "string" }, items: { type: "array", items: { type: "string" } } },
      required: ["note", "items"],
    };
    const request = { ...ask(QUESTIONS[0]!, ends, 0), format: { type: "json_schema", schema, strict: true } as const };
    const off = await replies("demo", "off", [request]);
    const on = await replies("demo", "lookup", [request]);
    expect(on.drafts.accepted).toBeGreaterThan(0);
    expect(on.texts).toEqual(off.texts);
    expect(on.texts[0]!.text.startsWith("{")).toBe(true);
  }, 60_000);

  test("sampled replies (temperature 1, seeded) are the same with drafts and without: each token is the sampler's own draw, once", async () => {
    // The sampler draws each of a reply's tokens once, from the logits after the reply so far, and
    // keeps a drafted token only where its draw is that token (speculative sampling's rule for a
    // draft that is certain of its guess): the draws, and so the reply, are those without drafts.
    const ends = await endTokens("demo");
    const requests = [11, 12, 13, 14].map((seed) => ask(QUESTIONS[0]!, ends, 1, seed));
    const off = [];
    const on = [];
    let accepted = 0;
    for (const request of requests) {
      off.push(...(await replies("demo", "off", [request])).texts);
      const drafted = await replies("demo", "lookup", [request]);
      on.push(...drafted.texts);
      accepted += drafted.drafts.accepted;
    }
    expect(accepted).toBeGreaterThan(0);
    expect(new Set(off.map(({ text }) => text)).size).toBeGreaterThan(1);
    expect(on).toEqual(off);
  }, 120_000);
});

describe.skipIf(natives === undefined)("a draft model's guesses (PARLEY_DRAFT_MODEL)", () => {
  test("verified as the lookup's are: greedy replies, alone and beside another, and seeded sampled ones are those without drafts", async () => {
    // The demo drafting for itself: its guesses are its own greedy choices, right nearly always.
    const ends = await endTokens("demo");
    for (const requests of [[ask(QUESTIONS[0]!, ends, 0)], QUESTIONS.map((question) => ask(question, ends, 0)), [ask(QUESTIONS[1]!, ends, 1, 21)]]) {
      const off = await replies("demo", "off", requests);
      const drafted = await replies("demo", "draft", requests, { draftModel: "demo" });
      expect(drafted.drafts.accepted).toBeGreaterThan(drafted.drafts.drafted / 2);
      expect(drafted.texts).toEqual(off.texts);
    }
  }, 120_000);

  test("auto: a draft model whose guesses fail is asked now and then only, its acceptance measured on its own guesses", async () => {
    // bench-draft for bench-small: random weights of one vocabulary, which agree on nothing.
    const ends = await endTokens("bench-small");
    const request = { ...ask(QUESTIONS[0]!, ends, 0), maxTokens: 256 };
    const { drafts, texts } = await replies("bench-small", "auto", [request], { draftModel: "bench-draft" });
    expect(texts[0]!.completionTokens).toBe(256);
    // A probe every 16 native calls of 4 steps: about 4 of 256 tokens; not a guess in every step.
    expect(drafts.drafted).toBeGreaterThan(0);
    expect(drafts.drafted).toBeLessThanOrEqual(16);
  }, 60_000);

  test("of another vocabulary: refused with `draft`, a warning and the reply's own guesses with `auto`", async () => {
    const draftModelPath = await presetModel("llama3");
    await expect(testEngine({ preset: "demo", speculate: "draft", draftModelPath })).rejects.toThrow(
      /cannot draft for this model: (its vocabulary has|token \d+ is)/,
    );
    const warnings: string[] = [];
    const engine = await testEngine({ preset: "demo", speculate: "auto", draftModelPath, onWarning: (message) => void warnings.push(message) });
    try {
      expect(warnings).toEqual(["replies draft from their own tokens: the draft model cannot draft for this model"]);
      expect((await generated(engine, ask(QUESTIONS[0]!, [], 0))).completionTokens).toBeGreaterThan(0);
    } finally {
      await engine.close();
    }
  }, 60_000);
});
