/**
 * Function calling on /v1/chat/completions: tools offered, a call forced by `tool_choice` and held
 * to the function's parameters by a grammar, the call parsed out of the model's own syntax into
 * `tool_calls` (whole, or streamed as OpenAI streams them), results sent back as `tool` messages.
 * Through the official `openai` SDK, the AI SDK's agent loop and LangChain; refusals name their
 * field. The families' templates are tested in families.test.ts.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";
import { generateText, stepCountIs, tool } from "ai";
import OpenAI from "openai";
import { zodFunction } from "openai/helpers/zod";
import { z } from "zod";
import { readGgufHeader } from "../../src/gguf/reader";
import { allowSlowTests, presetModel, servedEngine } from "../support";

allowSlowTests();

const app = servedEngine("tools", { parallel: 2 });
let client: OpenAI;

beforeAll(() => {
  client = new OpenAI({ apiKey: app.key, baseURL: `${app.served.url}/v1`, maxRetries: 0 });
});

const Weather = z.object({ city: z.string().max(24), days: z.number().int(), unit: z.enum(["celsius", "fahrenheit"]) });
const Time = z.object({ zone: z.string().max(16) });
const tools = [
  zodFunction({ name: "get_weather", description: "The weather in a city", parameters: Weather }),
  zodFunction({ name: "get_time", parameters: Time }),
];
const ask: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "What is the weather in Paris?" }];

describe("the openai SDK", () => {
  test("tool_choice required: the reply is a call that parses, its arguments valid, no content, finish_reason tool_calls", async () => {
    for (const [temperature, seed] of [
      [0, 1],
      [1, 2],
      [1, 3],
    ] as const) {
      const completion = await client.chat.completions.parse({
        model: "any",
        messages: ask,
        tools,
        tool_choice: "required",
        parallel_tool_calls: false,
        temperature,
        seed,
      });
      const { message, finish_reason } = completion.choices[0]!;
      expect(finish_reason).toBe("tool_calls");
      expect(message.content).toBeNull();
      expect(message.tool_calls).toHaveLength(1);
      const [call] = message.tool_calls!;
      if (call?.type !== "function") throw new Error("a function call was expected");
      expect(call.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
      const schema = call.function.name === "get_weather" ? Weather : Time;
      expect(schema.parse(call.function.parsed_arguments)).toEqual(call.function.parsed_arguments as never);
    }
  });

  test("a named tool_choice calls that function", async () => {
    for (const name of ["get_time", "get_weather"]) {
      const completion = await client.chat.completions.parse({
        model: "any",
        messages: ask,
        tools,
        tool_choice: { type: "function", function: { name } },
        temperature: 1,
        seed: 4,
      });
      const calls = completion.choices[0]!.message.tool_calls!;
      expect(calls.length).toBeGreaterThanOrEqual(1);
      for (const call of calls) expect(call.type === "function" && call.function.name).toBe(name);
    }
  });

  test("a round trip: the call, its result as a tool message, then the model's answer in words", async () => {
    const first = await client.chat.completions.create({
      model: "any",
      messages: ask,
      tools,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      temperature: 0,
    });
    const message = first.choices[0]!.message;
    const call = message.tool_calls![0]!;
    const history: OpenAI.ChatCompletionMessageParam[] = [
      ...ask,
      message,
      { role: "tool", tool_call_id: call.id, content: JSON.stringify({ temperature: 21, sky: "clear" }) },
    ];
    const second = await client.chat.completions.create({ model: "any", messages: history, tools, temperature: 0 });
    const answer = second.choices[0]!;
    expect(answer.finish_reason).toBe("stop");
    expect(answer.message.tool_calls).toBeUndefined();
    expect(answer.message.content).toMatch(/^[A-Z][\w', :!?.]*[.!?]$/);
  });

  test("streamed: the call's id and name come first, then its arguments in fragments as they are written; reassembled, the same call as unstreamed", async () => {
    const params = {
      model: "any",
      messages: ask,
      tools,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      parallel_tool_calls: false,
      temperature: 1,
      seed: 9,
    } as const;
    const whole = (await client.chat.completions.create(params)).choices[0]!.message.tool_calls![0]!;
    const stream = await client.chat.completions.create({ ...params, stream: true });
    const deltas: OpenAI.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
    let finish: string | null = null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      deltas.push(...(choice?.delta.tool_calls ?? []));
      if (choice?.delta.content) throw new Error(`no content was expected, got ${JSON.stringify(choice.delta.content)}`);
      finish = choice?.finish_reason ?? finish;
    }
    expect(finish).toBe("tool_calls");
    const [head, ...rest] = deltas;
    expect(head).toMatchObject({ index: 0, type: "function", function: { name: "get_weather", arguments: "" } });
    expect(head!.id).toMatch(/^call_/);
    expect(rest.every((delta) => delta.index === 0 && delta.id === undefined && delta.function?.name === undefined)).toBe(true);
    // A forced call is held by its grammar: it streams as the model writes it.
    expect(rest.length).toBeGreaterThan(1);
    const streamed = rest.map((delta) => delta.function!.arguments).join("");
    expect(whole.type === "function" && JSON.parse(whole.function.arguments)).toEqual(JSON.parse(streamed));
    // The SDK's own reassembly of the same stream.
    const final = (await client.chat.completions.stream(params).finalChatCompletion()).choices[0]!.message.tool_calls![0]!;
    expect(final.type === "function" && Weather.parse(final.function.parsed_arguments)).toBeTruthy();
  });
});

test("the AI SDK: generateText with two tools runs an agent loop, a forced call executed, then an answer in words", async () => {
  const parley = createOpenAICompatible({ name: "parley", baseURL: `${app.served.url}/v1`, apiKey: app.key });
  const executed: unknown[] = [];
  const result = await generateText({
    model: parley("any"),
    prompt: "What is the weather in Paris, and the time?",
    temperature: 0,
    tools: {
      weather: tool({ description: "The weather in a city", inputSchema: Weather, execute: async (input) => (executed.push(input), { temperature: 21 }) }),
      time: tool({ description: "The time in a zone", inputSchema: Time, execute: async (input) => (executed.push(input), { time: "12:00" }) }),
    },
    // The first step must call a tool; the second answers from its result.
    prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? "required" : "none" }),
    stopWhen: stepCountIs(2),
  });
  expect(result.steps).toHaveLength(2);
  const [calling, answering] = result.steps;
  expect(calling!.finishReason).toBe("tool-calls");
  expect(calling!.toolCalls.length).toBeGreaterThanOrEqual(1);
  expect(executed).toHaveLength(calling!.toolCalls.length);
  for (const input of executed) expect(Weather.safeParse(input).success || Time.safeParse(input).success).toBe(true);
  expect(answering!.finishReason).toBe("stop");
  expect(result.text).toMatch(/^[A-Z][\w', :!?.]*[.!?]$/);
});

test("LangChain: bindTools with a forced call returns tool_calls with parsed, valid arguments", async () => {
  const model = new ChatOpenAI({ model: "any", temperature: 0, apiKey: app.key, configuration: { baseURL: `${app.served.url}/v1` }, maxRetries: 0 });
  const bound = model.bindTools([{ name: "get_weather", description: "The weather in a city", schema: Weather }], { tool_choice: "get_weather" });
  const message = await bound.invoke("What is the weather in Paris?");
  expect(message.tool_calls).toHaveLength(1);
  expect(message.tool_calls![0]!.name).toBe("get_weather");
  expect(Weather.parse(message.tool_calls![0]!.args)).toBeDefined();
});

describe("tool_choice auto, on a model whose calls open with a token of their own (qwen2)", () => {
  const qwen = servedEngine("tools-qwen2", { preset: "qwen2", parallel: 1 });
  let opener: number;
  beforeAll(async () => {
    opener = (readGgufHeader(await presetModel("qwen2")).metadata["tokenizer.ggml.tokens"] as { items: readonly string[] }).items.indexOf("<tool_call>");
  });

  test("once the model writes <tool_call> (here because logit_bias all but forces it), the call is held to the parameters; the text before it is content", async () => {
    const qwenClient = new OpenAI({ apiKey: qwen.key, baseURL: `${qwen.served.url}/v1`, maxRetries: 0 });
    expect(opener).toBeGreaterThan(0);
    let called = 0;
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      const completion = await qwenClient.chat.completions.parse({
        model: "any",
        messages: ask,
        tools,
        tool_choice: "auto",
        parallel_tool_calls: false,
        temperature: 0.8,
        seed,
        max_tokens: 200,
        // The generated model opens a call of its own accord now and then (taught-calls.test.ts);
        // the bias makes it do so at most seeds.
        logit_bias: { [opener]: 30 },
      });
      const { message, finish_reason } = completion.choices[0]!;
      expect(message.content ?? "").not.toContain("<tool_call>");
      if (!message.tool_calls) continue;
      called++;
      expect(finish_reason).toBe("tool_calls");
      for (const call of message.tool_calls) {
        if (call.type !== "function") throw new Error("a function call was expected");
        const schema = call.function.name === "get_weather" ? Weather : Time;
        expect(schema.parse(call.function.parsed_arguments)).toEqual(call.function.parsed_arguments as never);
      }
    }
    expect(called).toBeGreaterThanOrEqual(3);
  });
});

describe("refused, with the field named", () => {
  const refusedParam = async (params: Record<string, unknown>): Promise<unknown> => {
    try {
      await client.chat.completions.create({ model: "any", messages: ask, temperature: 0, ...params } as never);
      return "accepted";
    } catch (error) {
      expect(error).toBeInstanceOf(OpenAI.BadRequestError);
      return (error as InstanceType<typeof OpenAI.BadRequestError>).param;
    }
  };
  const lookup = (parameters: object, name = "lookup") => ({ type: "function", function: { name, parameters } });
  const call = { id: "call_1", type: "function", function: { name: "lookup", arguments: "{}" } };

  test.each([
    [
      "an unknown function in tool_choice",
      { tools: [lookup({ type: "object" })], tool_choice: { type: "function", function: { name: "nope" } } },
      "tool_choice",
    ],
    ["a call asked for with no tools", { tool_choice: "required" }, "tool_choice"],
    ["two tools of one name", { tools: [lookup({ type: "object" }), lookup({ type: "object" })] }, "tools[1].function.name"],
    [
      "strict parameters with a keyword the grammar cannot hold",
      {
        tools: [
          { type: "function", function: { name: "lookup", strict: true, parameters: { type: "object", properties: { n: { type: "integer", minimum: 1 } } } } },
        ],
      },
      "tools[0].function.parameters",
    ],
    ["parameters that are no object", { tools: [lookup({ type: "string" })] }, "tools[0].function.parameters"],
    ["a tool message that answers no call", { messages: [...ask, { role: "tool", tool_call_id: "call_x", content: "{}" }] }, "messages[1].tool_call_id"],
    [
      "a result for another call than the assistant made",
      { messages: [...ask, { role: "assistant", content: null, tool_calls: [call] }, { role: "tool", tool_call_id: "call_2", content: "{}" }] },
      "messages[2].tool_call_id",
    ],
    [
      "a call's arguments that are no JSON object",
      { messages: [...ask, { role: "assistant", tool_calls: [{ ...call, function: { name: "lookup", arguments: "[1]" } }] }] },
      "messages[1].tool_calls[0].function.arguments",
    ],
    ["tool_calls on a user message", { messages: [{ role: "user", content: "hi", tool_calls: [call] }] }, "messages[0].tool_calls"],
    [
      "response_format beside a forced call",
      { tools: [lookup({ type: "object" })], tool_choice: "required", response_format: { type: "json_object" } },
      "response_format",
    ],
    ["response_format beside tools the model may call", { tools: [lookup({ type: "object" })], response_format: { type: "json_object" } }, "response_format"],
  ])("%s", async (_, params, param) => {
    expect(await refusedParam(params)).toBe(param);
  });

  test("tool_choice none with tools, or auto without: accepted, the plain reply", async () => {
    const plain = (await client.chat.completions.create({ model: "any", messages: ask, temperature: 0 })).choices[0]!.message.content;
    for (const params of [{ tools, tool_choice: "none" }, { tool_choice: "auto" }]) {
      const completion = await client.chat.completions.create({ model: "any", messages: ask, temperature: 0, ...params } as never);
      expect(completion.choices[0]!.message.content).toBe(plain);
    }
  });
});
