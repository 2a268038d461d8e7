/**
 * Every field of an OpenAI chat-completions request is honoured or refused, never silently
 * ignored: the sampling fields change the reply as they say, and a field Parley cannot honour
 * (or does not know) is a BadRequestError naming it. Through the official `openai` SDK.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { readGgufHeader } from "../../src/gguf/reader";
import { allowSlowTests, bearer, presetModel, servedEngine } from "../support";

allowSlowTests();

const GREEDY_REPLY = "I am happy to help you.";
const app = servedEngine("openai-fields");
let client: OpenAI;
/** The demo model's tokens, by id. */
let vocabulary: string[];

beforeAll(async () => {
  vocabulary = [...(readGgufHeader(await presetModel("demo")).metadata["tokenizer.ggml.tokens"] as { items: readonly string[] }).items];
  client = new OpenAI({ apiKey: app.key, baseURL: `${app.served.url}/v1`, maxRetries: 0 });
});

const hello = [{ role: "user" as const, content: "Hello" }];

type Params = Omit<OpenAI.ChatCompletionCreateParamsNonStreaming, "model" | "messages"> & Record<string, unknown>;

async function reply(params: Params = {}): Promise<string> {
  const completion = await client.chat.completions.create({ model: "any", messages: hello, ...params } as OpenAI.ChatCompletionCreateParamsNonStreaming);
  return completion.choices[0]!.message.content ?? "";
}

/** The BadRequestError's `param`, or what the request resolved to instead. */
async function refusedParam(params: Params): Promise<unknown> {
  try {
    return { resolved: await reply(params) };
  } catch (error) {
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    return (error as InstanceType<typeof OpenAI.BadRequestError>).param;
  }
}

const tokenId = (text: string) => {
  const id = vocabulary.indexOf(text);
  if (id < 0) throw new Error(`the demo model has no token ${JSON.stringify(text)}`);
  return id;
};

describe("conformance", () => {
  test("every reply has message.refusal null; an assistant's refusal part in the history is what it said", async () => {
    const completion = await client.chat.completions.create({ model: "any", messages: hello, temperature: 0 });
    expect(completion.choices[0]!.message).toEqual({ role: "assistant", content: GREEDY_REPLY, refusal: null });
    const history: OpenAI.ChatCompletionMessageParam[] = [
      ...hello,
      { role: "assistant", content: [{ type: "refusal", refusal: "I cannot." }] },
      { role: "user", content: "Why?" },
    ];
    const followUp = await client.chat.completions.create({ model: "any", messages: history, temperature: 0 });
    expect(followUp.choices[0]!.message.content).toBeString();
    expect(await refusedParam({ messages: [{ role: "user", content: [{ type: "refusal", refusal: "no" }] }] } as never)).toBe("messages[0]");
  });
});

describe("refused, never ignored", () => {
  test.each([
    [
      "tools[0].function.parameters",
      {
        tools: [
          {
            type: "function",
            function: { name: "lookup", strict: true, parameters: { type: "object", properties: { code: { type: "string", pattern: "^a" } } } },
          },
        ],
      },
    ],
    ["tool_choice", { tool_choice: "required" }],
    ["functions", { functions: [{ name: "lookup" }] }],
    ["response_format", { response_format: { type: "json_schema", json_schema: { name: "x", strict: true, schema: { type: "string", pattern: "^a" } } } }],
    ["top_logprobs", { top_logprobs: 2 }],
    ["top_logprobs", { logprobs: true, top_logprobs: 21 }],
    ["reasoning_effort", { reasoning_effort: "low" }],
    ["store", { store: true }],
    ["modalities", { modalities: ["text", "audio"] }],
    ["mirostat", { mirostat: 2 }],
    ["logit_bias", { logit_bias: { "not-a-token": 5 } }],
    ["logit_bias", { logit_bias: { "99999999": 5 } }],
    ["presence_penalty", { presence_penalty: 3 }],
    ["top_k", { top_k: -1 }],
  ] as [string, Params][])("%s: %j is a BadRequestError naming it", async (param, params) => {
    expect(await refusedParam(params)).toBe(param);
  });

  test("the same fields with values that change nothing are accepted, and the reply is the plain one", async () => {
    const noOps: Params = {
      temperature: 0,
      tools: [],
      tool_choice: "none",
      response_format: { type: "text" },
      logprobs: false,
      store: false,
      modalities: ["text"],
      parallel_tool_calls: true,
      user: "u-1",
      metadata: { purpose: "test" },
      prompt_cache_key: "k",
      safety_identifier: "s",
      top_logprobs: null,
    };
    expect(await reply(noOps)).toBe(GREEDY_REPLY);
  });
});

describe("sampling fields change the reply as they say", () => {
  test("logit_bias: -100 bans the greedy reply's first token, +100 forces another", async () => {
    expect(GREEDY_REPLY.startsWith("I")).toBe(true);
    const banned = await reply({ temperature: 0, logit_bias: { [tokenId("I")]: -100 } });
    expect(banned).not.toStartWith("I");
    expect(banned.length).toBeGreaterThan(0);
    const forced = await reply({ temperature: 0, max_tokens: 1, logit_bias: { [tokenId("The")]: 100 } });
    expect(forced).toBe("The");
  });

  test("top_k 1, or min_p 1, at temperature 2 is greedy; without them, the same seed at temperature 2 is not", async () => {
    const wild = { temperature: 2, seed: 7 };
    const sampled = await Promise.all([1, 2, 3, 4].map((seed) => reply({ ...wild, seed })));
    expect(sampled.some((text) => text !== GREEDY_REPLY)).toBe(true);
    expect(await reply({ ...wild, top_k: 1 })).toBe(GREEDY_REPLY);
    expect(await reply({ ...wild, min_p: 1 })).toBe(GREEDY_REPLY);
  });

  test("penalties: a greedy reply that repeats tokens changes under each of repeat, presence and frequency penalties", async () => {
    // The model's ends of generation banned: the reply runs to max_tokens.
    const endless = { [tokenId("<|im_end|>")]: -100, [tokenId("</s>")]: -100 };
    const long = { temperature: 0, max_tokens: 60, logit_bias: endless };
    const plain = await reply(long);
    const words = plain.split(/\s+/);
    // The premise: a greedy reply of this length repeats itself (otherwise the penalties could not show).
    expect(new Set(words).size).toBeLessThan(words.length);
    for (const penalty of [{ repeat_penalty: 5 }, { presence_penalty: 2 }, { frequency_penalty: 2 }]) {
      expect({ penalty, text: await reply({ ...long, ...penalty }) }).not.toEqual({ penalty, text: plain });
    }
  });
});

describe("the native API takes the same sampling fields", () => {
  const chat = async (conversation: string, fields: object) => {
    const response = await fetch(`${app.served.url}/api/v1.0/chat`, {
      method: "POST",
      headers: { ...bearer(app.key), "content-type": "application/json" },
      body: JSON.stringify({ message: "Hello", conversation_id: conversation, ...fields }),
    });
    return { status: response.status, body: (await response.json()) as { message?: { content: string }; error?: { param: string } } };
  };

  test("logit_bias and top_k change the reply; a token the model does not have is refused before anything is stored", async () => {
    expect((await chat("native-plain", { temperature: 0 })).body.message?.content).toBe(GREEDY_REPLY);
    expect((await chat("native-banned", { temperature: 0, logit_bias: { [tokenId("I")]: -100 } })).body.message?.content).not.toStartWith("I");
    expect((await chat("native-top-k", { temperature: 1, seed: 3, top_k: 1 })).body.message?.content).toBe(GREEDY_REPLY);
    const refused = await chat("native-refused", { logit_bias: { "99999999": 1 } });
    expect([refused.status, refused.body.error?.param]).toEqual([422, "logit_bias"]);
    const listing = await fetch(`${app.served.url}/api/v1.0/chat/messages?conversation_id=native-refused`, { headers: bearer(app.key) });
    expect(((await listing.json()) as { data: unknown[] }).data).toEqual([]);
  });
});
