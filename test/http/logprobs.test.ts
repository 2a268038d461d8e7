/**
 * `logprobs` and `top_logprobs` on /v1/chat/completions: each answer token's log-probability under
 * the model's own distribution (before any sampler) and the most likely tokens' at its place, whole
 * or streamed, for the answer only (a reasoning model's thought has none). They come from Parley's
 * compiled natives (src/natives/token-logprobs.cpp): without them the tests skip, except under CI.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { readGgufHeader } from "../../src/gguf/reader";
import { allowSlowTests, compiledNatives, presetModel, rejection, servedEngine } from "../support";

allowSlowTests();

const natives = await compiledNatives();
const hello = [{ role: "user" as const, content: "Hello" }];
type Logprobs = OpenAI.ChatCompletion.Choice.Logprobs;
type Params = Omit<OpenAI.ChatCompletionCreateParamsNonStreaming, "model" | "messages"> & Record<string, unknown>;

/**
 * The text the entries spell, as the content shows it: a SentencePiece model's first token carries
 * the space its text is tokenized with, which the detokenized reply leaves out.
 */
const spelled = (entries: readonly { token: string }[]) =>
  entries
    .map((entry) => entry.token)
    .join("")
    .trimStart();

const clientOf = (app: { key: string; served: { url: string } }) => new OpenAI({ apiKey: app.key, baseURL: `${app.served.url}/v1`, maxRetries: 0 });

/** What every entry must be, whatever the reply: a log-probability, its bytes spelling its text, the top ones in order. */
function expectWellFormed(logprobs: Logprobs, top: number): void {
  for (const entry of logprobs.content!) {
    expect(entry.logprob).toBeLessThanOrEqual(0);
    expect(new TextDecoder().decode(Uint8Array.from(entry.bytes!))).toBe(entry.token);
    expect(entry.top_logprobs).toHaveLength(top);
    const values = entry.top_logprobs.map((other) => other.logprob);
    expect(values).toEqual([...values].sort((a, b) => b - a));
    // Probabilities of distinct tokens: together at most 1.
    expect(values.reduce((sum, value) => sum + Math.exp(value), 0)).toBeLessThanOrEqual(1 + 1e-9);
    // The token itself is among the top ones whenever it is more likely than the last of them (ties go by token id).
    if (top > 0 && entry.logprob > values.at(-1)!) expect(entry.top_logprobs.map((other) => other.token)).toContain(entry.token);
  }
}

describe.skipIf(natives === undefined)("logprobs (compiled natives)", () => {
  const app = servedEngine("logprobs");
  let client: OpenAI;
  let vocabulary: readonly string[];
  beforeAll(async () => {
    client = clientOf(app);
    vocabulary = (readGgufHeader(await presetModel("demo")).metadata["tokenizer.ggml.tokens"] as { items: readonly string[] }).items;
  });
  const complete = (params: Params) =>
    client.chat.completions.create({ model: "any", messages: hello, ...params } as OpenAI.ChatCompletionCreateParamsNonStreaming);

  test("greedy: one entry per answer token, spelling the content; each token the most likely at its place", async () => {
    const { message, logprobs } = (await complete({ temperature: 0, logprobs: true, top_logprobs: 5 })).choices[0]!;
    expectWellFormed(logprobs!, 5);
    expect(spelled(logprobs!.content!)).toBe(message.content!);
    for (const entry of logprobs!.content!)
      expect({ token: entry.token, logprob: entry.logprob }).toEqual({ token: entry.top_logprobs[0]!.token, logprob: entry.top_logprobs[0]!.logprob });
    // Without top_logprobs, the same tokens and values and no others.
    const plain = (await complete({ temperature: 0, logprobs: true })).choices[0]!.logprobs!;
    expect(plain.content!.map(({ token, logprob, top_logprobs }) => ({ token, logprob, top: top_logprobs.length }))).toEqual(
      logprobs!.content!.map(({ token, logprob }) => ({ token, logprob, top: 0 })),
    );
    expect((await complete({ temperature: 0 })).choices[0]!.logprobs).toBeNull();
  });

  test("the model's own distribution, before the sampler: a token forced by logit_bias keeps its low log-probability", async () => {
    const forced = vocabulary.indexOf("▁help");
    expect(forced).toBeGreaterThan(0);
    const { logprobs } = (await complete({ temperature: 0, logprobs: true, top_logprobs: 3, max_tokens: 3, logit_bias: { [forced]: 100 } })).choices[0]!;
    expectWellFormed(logprobs!, 3);
    const first = logprobs!.content![0]!;
    expect(first.token).toBe(" help");
    expect(first.logprob).toBeLessThan(first.top_logprobs[0]!.logprob);
    expect(first.top_logprobs.map((other) => other.token)).not.toContain(" help");
  });

  test("streamed: the chunks' entries, in order, are the unstreamed reply's, and each comes after its text", async () => {
    const params = { temperature: 1, seed: 11, logprobs: true, top_logprobs: 2 } as const;
    const whole = (await complete(params)).choices[0]!;
    const stream = await client.chat.completions.create({ model: "any", messages: hello, ...params, stream: true });
    let content = "";
    const entries: OpenAI.ChatCompletionTokenLogprob[] = [];
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      content += choice?.delta.content ?? "";
      entries.push(...(choice?.logprobs?.content ?? []));
      // What the entries so far spell has been given as content already.
      expect(content.startsWith(spelled(entries))).toBe(true);
    }
    expect(content).toBe(whole.message.content!);
    expect(entries).toEqual(whole.logprobs!.content!);
  });

  test("a stop string: entries only for tokens whose text is wholly in the content", async () => {
    const { message, logprobs } = (await complete({ temperature: 0, logprobs: true, stop: ["happy"] })).choices[0]!;
    expect(message.content).toBe("I am ");
    const text = spelled(logprobs!.content!);
    expect(message.content!.startsWith(text)).toBe(true);
    expect(text.length).toBeGreaterThan(0);
  });

  test.each([
    ["top_logprobs", { logprobs: true, top_logprobs: 21 }],
    ["top_logprobs", { logprobs: true, top_logprobs: -1 }],
    ["top_logprobs", { top_logprobs: 2 }],
    ["top_logprobs", { logprobs: false, top_logprobs: 2 }],
  ] as [string, Params][])("%s: %j is a BadRequestError naming it", async (param, params) => {
    const error = await rejection(complete(params));
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe(param);
  });
});

describe.skipIf(natives === undefined)("logprobs of a reasoning model (compiled natives)", () => {
  const app = servedEngine("logprobs-qwen3", { preset: "qwen3-thinking", parallel: 1 });

  test("the thought has none: the entries spell the answer, streamed or not", async () => {
    const client = clientOf(app);
    const { message, logprobs } = (await client.chat.completions.create({ model: "any", messages: hello, temperature: 0, logprobs: true, top_logprobs: 1 }))
      .choices[0]!;
    expect((message as { reasoning_content?: string }).reasoning_content!.length).toBeGreaterThan(0);
    expectWellFormed(logprobs!, 1);
    // The first answer token may carry the whitespace after the thought, which the answer leaves out.
    expect(spelled(logprobs!.content!)).toBe(message.content!);
  });
});
