/**
 * OpenAI's legacy completions through the openai SDK: a prompt continued as written (no chat
 * template: a prompt that is the chat template's rendering answers as the chat does), plain and
 * streamed, the legacy log-probabilities, echo, stop strings, the prompt cache per user, and each
 * field Parley cannot honour refused by name.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { allowSlowTests, rejection, servedDocument, servedEngine } from "../support";

allowSlowTests();

const app = servedEngine("text-completions", { parallel: 2 });
let alice: OpenAI;
let bob: OpenAI;
beforeAll(() => {
  alice = new OpenAI({ apiKey: app.key, baseURL: `${app.served.url}/v1`, maxRetries: 0 });
  bob = new OpenAI({ apiKey: app.otherKey, baseURL: `${app.served.url}/v1`, maxRetries: 0 });
});

/** The demo's ChatML rendering of one user message, ready for the reply. */
const CHATML_HELLO = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n";

describe("legacy completions", () => {
  test("a prompt is continued as written: the chat template's own rendering answers as the chat does", async () => {
    const raw = await alice.completions.create({ model: "parley", prompt: CHATML_HELLO, temperature: 0, max_tokens: 12 });
    const chat = await alice.chat.completions.create({ model: "parley", messages: [{ role: "user", content: "Hello" }], temperature: 0, max_tokens: 12 });
    expect(raw.object).toBe("text_completion");
    expect(raw.id).toStartWith("cmpl-");
    expect(raw.choices[0]!.text).toBe(chat.choices[0]!.message.content!);
    expect(raw.choices[0]!.text.length).toBeGreaterThan(0);
    expect(raw.usage!.prompt_tokens).toBe(chat.usage!.prompt_tokens);
    // Without the template the same words are another prompt: the tokens the text takes, and a bos.
    const plain = await alice.completions.create({ model: "parley", prompt: "Hello", temperature: 0, max_tokens: 4 });
    expect(plain.usage!.prompt_tokens).toBeLessThan(raw.usage!.prompt_tokens);
  });

  test("sixteen tokens unless asked, as OpenAI's; the stream adds up to the plain completion, with its usage", async () => {
    const prompt = "The weather today is";
    const whole = await alice.completions.create({ prompt, model: "parley", temperature: 0, seed: 3 });
    expect(whole.usage!.completion_tokens).toBeLessThanOrEqual(16);
    let text = "";
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    const stream = await alice.completions.create({ prompt, model: "parley", temperature: 0, seed: 3, stream: true, stream_options: { include_usage: true } });
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        text += choice.text;
        finish = choice.finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(whole.choices[0]!.text);
    expect(finish).toBe(whole.choices[0]!.finish_reason);
    expect(usage?.completion_tokens).toBe(whole.usage!.completion_tokens);
  });

  test("logprobs in the legacy shape: tokens spelling the text, their offsets, the most likely beside each; streamed alike", async () => {
    const request = { model: "parley", prompt: "Hello there, how", temperature: 0, max_tokens: 6, logprobs: 2 } as const;
    const { choices } = await alice.completions.create(request);
    const { text, logprobs } = choices[0]!;
    expect(logprobs!.tokens!.join("")).toBe(text);
    expect(logprobs!.text_offset).toEqual(logprobs!.tokens!.map((_, i) => logprobs!.tokens!.slice(0, i).join("").length));
    for (const [i, top] of logprobs!.top_logprobs!.entries()) {
      expect(Object.keys(top).length).toBeGreaterThan(0);
      expect(Object.keys(top).length).toBeLessThanOrEqual(2);
      // Greedy: the token taken is the most likely one.
      expect(logprobs!.token_logprobs![i]).toBeCloseTo(Math.max(...Object.values(top)), 6);
    }
    const streamed: string[] = [];
    const offsets: number[] = [];
    for await (const chunk of await alice.completions.create({ ...request, stream: true })) {
      streamed.push(...(chunk.choices[0]?.logprobs?.tokens ?? []));
      offsets.push(...(chunk.choices[0]?.logprobs?.text_offset ?? []));
    }
    expect(streamed).toEqual(logprobs!.tokens!);
    expect(offsets).toEqual(logprobs!.text_offset!);
  });

  test("echo puts the prompt first; a stop string ends the text before it", async () => {
    const prompt = "Hello there, how";
    const echoed = await alice.completions.create({ model: "parley", prompt, temperature: 0, max_tokens: 6, echo: true });
    const plain = await alice.completions.create({ model: "parley", prompt, temperature: 0, max_tokens: 6 });
    expect(echoed.choices[0]!.text).toBe(prompt + plain.choices[0]!.text);
    const word = plain.choices[0]!.text.trim().split(/\s+/)[0]!;
    const stopped = await alice.completions.create({ model: "parley", prompt, temperature: 0, max_tokens: 6, stop: [word] });
    expect(stopped.choices[0]!.text).toBe(plain.choices[0]!.text.slice(0, plain.choices[0]!.text.indexOf(word)));
    expect(stopped.choices[0]!.finish_reason).toBe("stop");
  });

  test("a user's next prompt reuses the cached prefix of theirs, never of another user's", async () => {
    const prompt = `${"A long shared opening about the sea and the weather. ".repeat(6)}Then`;
    await alice.completions.create({ model: "parley", prompt, temperature: 0, max_tokens: 2 });
    const again = await alice.completions.create({ model: "parley", prompt: `${prompt} more`, temperature: 0, max_tokens: 2 });
    expect(again.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(40);
    const other = await bob.completions.create({ model: "parley", prompt: `${prompt} more`, temperature: 0, max_tokens: 2 });
    // At most the bos every prompt starts with: nothing of what alice sent.
    expect(other.usage!.prompt_tokens_details!.cached_tokens).toBeLessThanOrEqual(1);
  });

  test("completions, their chunks and refusals match the served OpenAPI document", async () => {
    const spec = await servedDocument(app.served.url);
    const send = (body: object) =>
      fetch(`${app.served.url}/v1/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${app.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "parley", prompt: "Hello there, how", max_tokens: 4, temperature: 0, ...body }),
      });
    const plain = await send({ logprobs: 2, echo: false });
    spec.expectDocumented("/v1/completions", "post", 200, await plain.json());
    const chunk = spec.schemaAt("components", "schemas", "TextCompletion");
    const events = (await (await send({ stream: true, logprobs: 1, stream_options: { include_usage: true } })).text())
      .split("\n\n")
      .filter((event) => event.startsWith("data: {"));
    expect(events.length).toBeGreaterThan(2);
    for (const event of events) spec.expectValid(chunk, JSON.parse(event.slice("data: ".length)), "a chunk");
    const refused = await send({ n: 3 });
    spec.expectDocumented("/v1/completions", "post", 400, await refused.json());
  });

  test("what Parley cannot honour is refused by name", async () => {
    const refused = async (body: Record<string, unknown>) => {
      const error = (await rejection(alice.completions.create({ model: "parley", prompt: "Hi", max_tokens: 2, ...body } as never))) as InstanceType<
        typeof OpenAI.APIError
      >;
      return { status: error.status, param: (error.error as { param?: string }).param };
    };
    expect(await refused({ suffix: "end" })).toEqual({ status: 400, param: "suffix" });
    expect(await refused({ n: 2 })).toEqual({ status: 400, param: "n" });
    expect(await refused({ best_of: 3 })).toEqual({ status: 400, param: "best_of" });
    expect(await refused({ prompt: ["one", "two"] })).toEqual({ status: 400, param: "prompt" });
    expect(await refused({ prompt: [1, 2, 3] })).toEqual({ status: 400, param: "prompt" });
    expect(await refused({ echo: true, logprobs: 1 })).toEqual({ status: 400, param: "echo" });
    expect(await refused({ logprobs: 6 })).toEqual({ status: 400, param: "logprobs" });
    expect(await refused({ logit_bias: { 999999: 5 } })).toEqual({ status: 400, param: "logit_bias" });
    expect(await refused({ prompt: "word ".repeat(4000) })).toEqual({ status: 400, param: "prompt" });
    expect(await refused({ frobnicate: true })).toEqual({ status: 400, param: "frobnicate" });
  });
});
