/**
 * OpenAI's Responses API through the official `openai` SDK: text, streamed typed events,
 * instructions, a function call round trip with input items, `text.format`, a reasoning model's
 * output items, refusals; kept responses (retrieve, input items, delete, chains with
 * `previous_response_id` reusing the cache, another user's ids not found); and through the AI
 * SDK's Responses provider, over a chain too.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, streamText, tool } from "ai";
import OpenAI from "openai";
import { zodTextFormat } from "openai/helpers/zod";
import { z } from "zod";
import { allowSlowTests, rejection, responsesWeatherTool, servedEngine } from "../support";

allowSlowTests();

const GREEDY_REPLY = "I am happy to help you.";
const app = servedEngine("responses", { parallel: 2 });
let client: OpenAI;

beforeAll(() => {
  client = new OpenAI({ apiKey: app.key, baseURL: `${app.served.url}/v1`, maxRetries: 0 });
});

const weather = responsesWeatherTool;

describe("the openai SDK's responses", () => {
  test("create: the model's text as a message item, output_text, usage, status completed", async () => {
    const response = await client.responses.create({ model: "any", input: "Hello", store: false, temperature: 0 });
    expect(response).toMatchObject({
      object: "response",
      status: "completed",
      store: false,
      error: null,
      incomplete_details: null,
      previous_response_id: null,
    });
    expect(response.id).toMatch(/^resp_/);
    expect(response.output_text).toBe(GREEDY_REPLY);
    expect(response.output).toHaveLength(1);
    expect(response.output[0]).toMatchObject({
      type: "message",
      role: "assistant",
      status: "completed",
      content: [{ type: "output_text", text: GREEDY_REPLY }],
    });
    expect(response.usage!.input_tokens).toBeGreaterThan(0);
    expect(response.usage!.output_tokens).toBeGreaterThan(0);
    expect(response.usage!.total_tokens).toBe(response.usage!.input_tokens + response.usage!.output_tokens);
  });

  test("instructions and message items are the history: the same prompt as the same turns on chat completions", async () => {
    const messages = [
      { role: "user" as const, content: "Hi" },
      { role: "assistant" as const, content: "Hello." },
      { role: "user" as const, content: "Tell me more" },
    ];
    const viaResponses = await client.responses.create({ model: "any", instructions: "Be brief.", input: messages, store: false, temperature: 0 });
    const viaChat = await client.chat.completions.create({ model: "any", messages: [{ role: "system", content: "Be brief." }, ...messages], temperature: 0 });
    expect(viaResponses.output_text).toBe(viaChat.choices[0]!.message.content!);
    expect(viaResponses.usage!.input_tokens).toBe(viaChat.usage!.prompt_tokens);
  });

  test("stream: typed events in order, numbered from 0; the deltas make the final text", async () => {
    const stream = await client.responses.create({ model: "any", input: "Hello", store: false, temperature: 1, stream: true });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, i) => i));
    const types = events.map((event) => event.type);
    expect(types.slice(0, 4)).toEqual(["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]);
    expect(types.slice(-4)).toEqual(["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]);
    const deltas = events.flatMap((event) => (event.type === "response.output_text.delta" ? [event.delta] : []));
    expect(deltas.length).toBeGreaterThan(1);
    const completed = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
    expect(deltas.join("")).toBe(
      completed.response.output_text ??
        (completed.response.output[0] as OpenAI.Responses.ResponseOutputMessage).content.map((part) => (part.type === "output_text" ? part.text : "")).join(""),
    );
    // The SDK's own helper assembles the same.
    const final = await client.responses.stream({ model: "any", input: "Hello", store: false, temperature: 0 }).finalResponse();
    expect(final.output_text).toBe(GREEDY_REPLY);
  });

  test("a function call round trip: a forced call, its output as an input item, then the answer in words", async () => {
    const first = await client.responses.create({
      model: "any",
      input: "What is the weather in Paris?",
      tools: [weather],
      tool_choice: "required",
      store: false,
      temperature: 0,
    });
    const call = first.output.find((item) => item.type === "function_call");
    if (call?.type !== "function_call") throw new Error("a function call was expected");
    expect(call.name).toBe("get_weather");
    expect(Object.keys(JSON.parse(call.arguments) as object)).toEqual(["city"]);
    expect(first.output.some((item) => item.type === "message")).toBe(false);
    const second = await client.responses.create({
      model: "any",
      input: [
        { role: "user", content: "What is the weather in Paris?" },
        call,
        { type: "function_call_output", call_id: call.call_id, output: '{"temperature": 21}' },
      ],
      tools: [weather],
      store: false,
      temperature: 0,
    });
    expect(second.status).toBe("completed");
    expect(second.output_text).toMatch(/^[A-Z][\w', :!?.]*[.!?]$/);
  });

  test("streamed call: added, its arguments as they are written, done; the final response has the call", async () => {
    const stream = client.responses.stream({
      model: "any",
      input: "Weather in Rome?",
      tools: [weather],
      tool_choice: { type: "function", name: "get_weather" },
      store: false,
      temperature: 0,
    });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    expect(types.filter((type) => type === "response.function_call_arguments.delta").length).toBeGreaterThan(1);
    expect(types).toContain("response.function_call_arguments.done");
    const final = await stream.finalResponse();
    const call = final.output.find((item) => item.type === "function_call");
    expect(call?.type === "function_call" && JSON.parse(call.arguments)).toHaveProperty("city");
  });

  test("text.format json_schema: responses.parse returns a parsed object that validates", async () => {
    const Person = z.object({ name: z.string(), age: z.number().int() });
    const response = await client.responses.parse({
      model: "any",
      input: "Describe a person",
      temperature: 0,
      text: { format: zodTextFormat(Person, "person") },
    });
    expect(Person.parse(response.output_parsed)).toEqual(response.output_parsed!);
    // Kept with its format.
    const kept = await client.responses.retrieve(response.id);
    expect(JSON.parse(kept.output_text)).toEqual(response.output_parsed!);
    expect(kept.text?.format).toMatchObject({ type: "json_schema", name: "person" });
  });

  test("max_output_tokens reached: status incomplete, incomplete_details max_output_tokens", async () => {
    const response = await client.responses.create({ model: "any", input: "Hello", store: false, temperature: 0, max_output_tokens: 2 });
    expect(response.status).toBe("incomplete");
    expect(response.incomplete_details).toEqual({ reason: "max_output_tokens" });
  });

  test.each([
    ["store", { store: "yes" }],
    ["background", { background: true }],
    ["reasoning", { reasoning: { effort: "low" } }],
    ["top_logprobs", { top_logprobs: 2 }],
    ["seed", { seed: 3 }],
    ["tool_choice", { tool_choice: "required" }],
    ["input[0].call_id", { input: [{ type: "function_call_output", call_id: "call_x", output: "{}" }] }],
    ["tools[0].parameters", { tools: [{ ...weather, parameters: { type: "object", properties: { n: { type: "integer", minimum: 1 } } } }] }],
    ["text.format", { text: { format: { type: "json_schema", name: "x", strict: true, schema: { type: "string", pattern: "^a" } } } }],
    ["text.format", { tools: [weather], text: { format: { type: "json_object" } } }],
  ] as [string, Record<string, unknown>][])("%s: %j is a BadRequestError naming it", async (param, params) => {
    const error = await rejection(client.responses.create({ model: "any", input: "Hello", store: false, ...params } as never));
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe(param);
  });
});

describe("kept responses", () => {
  /** The same turns on chat completions, user and assistant by turns, greedy. */
  const statelessly = (turns: string[]) =>
    client.chat.completions.create({
      model: "any",
      temperature: 0,
      messages: turns.map((content, i) => ({ role: i % 2 === 0 ? ("user" as const) : ("assistant" as const), content })),
    });
  let other: OpenAI;
  beforeAll(() => {
    other = new OpenAI({ apiKey: app.otherKey, baseURL: `${app.served.url}/v1`, maxRetries: 0 });
  });

  test("kept by default: retrieved as it was answered, its input items listed in pages, deleted", async () => {
    const response = await client.responses.create({
      model: "any",
      instructions: "Be brief.",
      input: [
        { role: "user", content: "Hi" },
        { role: "assistant", content: "Hello." },
        { role: "user", content: "More" },
      ],
      temperature: 0,
    });
    expect(response).toMatchObject({ status: "completed", store: true, previous_response_id: null });
    expect(await client.responses.retrieve(response.id)).toEqual(response);

    const items = await client.responses.inputItems.list(response.id);
    expect(
      items.data.map((item) => (item.type === "message" ? [item.role, item.content.map((part) => ("text" in part ? part.text : "")).join("")] : item.type)),
    ).toEqual([
      ["user", "More"],
      ["assistant", "Hello."],
      ["user", "Hi"],
    ]);
    const firstPage = await client.responses.inputItems.list(response.id, { order: "asc", limit: 2 });
    expect(firstPage.data).toEqual(items.data.toReversed().slice(0, 2));
    expect(firstPage.has_more).toBe(true);
    const rest = await firstPage.getNextPage();
    expect(rest.data).toEqual([items.data[0]!]);
    expect(rest.has_more).toBe(false);

    await client.responses.delete(response.id);
    expect(await rejection(client.responses.retrieve(response.id))).toBeInstanceOf(OpenAI.NotFoundError);
    expect(await rejection(client.responses.delete(response.id))).toBeInstanceOf(OpenAI.NotFoundError);
  });

  test("a chain: the second response answers the whole history as chat completions would, reusing the first one's cached tokens", async () => {
    const first = await client.responses.create({ model: "any", input: "Hello", temperature: 0 });
    const second = await client.responses.create({ model: "any", previous_response_id: first.id, input: "Tell me more", temperature: 0 });
    expect(second.previous_response_id).toBe(first.id);
    const stateless = await statelessly(["Hello", first.output_text, "Tell me more"]);
    expect(second.output_text).toBe(stateless.choices[0]!.message.content!);
    expect(second.usage!.input_tokens).toBe(stateless.usage!.prompt_tokens);
    // Only the new turn is evaluated: the first response's prompt and reply are still cached.
    expect(second.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(first.usage!.input_tokens);
    // The input items are the response's own; the chain's earlier ones are the earlier responses'.
    expect((await client.responses.inputItems.list(second.id)).data).toHaveLength(1);

    // A deleted response ends the chain there: what continues it no longer sees its turns.
    await client.responses.delete(first.id);
    const third = await client.responses.create({ model: "any", previous_response_id: second.id, input: "Thanks", temperature: 0 });
    const alone = await statelessly(["Tell me more", second.output_text, "Thanks"]);
    expect(third.usage!.input_tokens).toBe(alone.usage!.prompt_tokens);
  });

  test("a function call round trip over a chain: the call kept, only its output sent", async () => {
    const first = await client.responses.create({
      model: "any",
      input: "What is the weather in Paris?",
      tools: [weather],
      tool_choice: "required",
      temperature: 0,
    });
    const call = first.output.find((item) => item.type === "function_call");
    if (call?.type !== "function_call") throw new Error("a function call was expected");
    const second = await client.responses.create({
      model: "any",
      previous_response_id: first.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: '{"temperature": 21}' }],
      tools: [weather],
      temperature: 0,
    });
    expect(second.status).toBe("completed");
    expect(second.output_text.length).toBeGreaterThan(0);
    expect(second.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(0);
    const [output] = (await client.responses.inputItems.list(second.id)).data;
    expect(output).toMatchObject({ type: "function_call_output", call_id: call.call_id, output: '{"temperature": 21}' });
  });

  test("streamed and kept: the events name the items the kept response has", async () => {
    const final = await client.responses.stream({ model: "any", input: "Hello", temperature: 0 }).finalResponse();
    const kept = await client.responses.retrieve(final.id);
    expect(kept.output.map((item) => item.id)).toEqual(final.output.map((item) => item.id));
    expect(kept.output_text).toBe(final.output_text);
    expect(kept.status).toBe("completed");
  });

  test("another user's response is not found, by every route and as previous_response_id", async () => {
    const response = await client.responses.create({ model: "any", input: "Hello", temperature: 0, max_output_tokens: 4 });
    for (const attempt of [
      other.responses.retrieve(response.id),
      other.responses.inputItems.list(response.id),
      other.responses.delete(response.id),
      other.responses.create({ model: "any", previous_response_id: response.id, input: "Hi" }),
    ]) {
      expect(await rejection(attempt)).toBeInstanceOf(OpenAI.NotFoundError);
    }
    expect((await client.responses.retrieve(response.id)).id).toBe(response.id);
  });

  test("store: false answers without keeping", async () => {
    const response = await client.responses.create({ model: "any", input: "Hello", store: false, max_output_tokens: 4 });
    expect(response).toMatchObject({ store: false });
    expect(await rejection(client.responses.retrieve(response.id))).toBeInstanceOf(OpenAI.NotFoundError);
  });
});

test("the AI SDK's Responses provider: generateText and streamText, with store: false", async () => {
  const parley = createOpenAI({ baseURL: `${app.served.url}/v1`, apiKey: app.key });
  const providerOptions = { openai: { store: false } };
  const { text, finishReason } = await generateText({ model: parley.responses("any"), prompt: "Hello", temperature: 0, providerOptions });
  expect({ text, finishReason }).toEqual({ text: GREEDY_REPLY, finishReason: "stop" });
  const streamed = streamText({ model: parley.responses("any"), system: "Be brief.", prompt: "Hello", temperature: 0, providerOptions });
  let joined = "";
  for await (const delta of streamed.textStream) joined += delta;
  expect(joined).toBe(await streamed.text);
  expect(joined.length).toBeGreaterThan(0);
});

test("the AI SDK's Responses provider over a chain: previousResponseId continues a kept response", async () => {
  const parley = createOpenAI({ baseURL: `${app.served.url}/v1`, apiKey: app.key });
  const first = await generateText({ model: parley.responses("any"), prompt: "Hello", temperature: 0 });
  const previousResponseId = first.providerMetadata?.openai?.responseId as string;
  expect(previousResponseId).toMatch(/^resp_/);
  const second = await generateText({
    model: parley.responses("any"),
    prompt: "Tell me more",
    temperature: 0,
    providerOptions: { openai: { previousResponseId } },
  });
  const viaSdk = await client.responses.create({ model: "any", previous_response_id: previousResponseId, input: "Tell me more", temperature: 0 });
  expect(second.text).toBe(viaSdk.output_text);
  expect(second.text.length).toBeGreaterThan(0);
});

describe("a reasoning model's response", () => {
  const qwen = servedEngine("responses-qwen3", { preset: "qwen3-thinking", parallel: 1 });

  test("the thought is a reasoning item before the message, whole or streamed", async () => {
    const qwenClient = new OpenAI({ apiKey: qwen.key, baseURL: `${qwen.served.url}/v1`, maxRetries: 0 });
    const response = await qwenClient.responses.create({ model: "any", input: "Hello", store: false, temperature: 0 });
    expect(response.output.map((item) => item.type)).toEqual(["reasoning", "message"]);
    const reasoning = response.output[0] as OpenAI.Responses.ResponseReasoningItem;
    expect(reasoning.content![0]!.text.length).toBeGreaterThan(0);
    expect(response.output_text).not.toContain("<think>");
    // The thought's tokens are counted apart, as OpenAI's usage shows them.
    const { input_tokens_details, output_tokens_details, output_tokens } = response.usage!;
    expect(output_tokens_details.reasoning_tokens).toBeGreaterThan(0);
    expect(output_tokens_details.reasoning_tokens).toBeLessThan(output_tokens);
    expect(input_tokens_details).toMatchObject({ cache_write_tokens: 0 });
    const streamed = await qwenClient.responses.stream({ model: "any", input: "Hello", store: false, temperature: 0 }).finalResponse();
    expect(streamed.output.map((item) => item.type)).toEqual(["reasoning", "message"]);
    expect(streamed.output_text).toBe(response.output_text);
  });

  test("the AI SDK's Responses provider through a tool loop: step 2 names step 1's kept items by item_reference, resolved in order", async () => {
    const sent: { input: { type?: string; id?: string }[] }[] = [];
    const parley = createOpenAI({
      baseURL: `${qwen.served.url}/v1`,
      apiKey: qwen.key,
      fetch: (async (url: string | URL | Request, init?: RequestInit) => {
        if (String(url).endsWith("/responses")) sent.push(JSON.parse(String(init?.body)));
        return fetch(url, init);
      }) as typeof fetch,
    });
    const weather = tool({
      description: "The weather in a city",
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => `sunny in ${city}`,
    });
    const result = await generateText({
      model: parley.responses("any"),
      prompt: "What is the weather in Paris?",
      tools: { weather },
      // A call on the first step, an answer on the second: a bigram model does not know a tool's
      // result answers its question.
      prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? "required" : "none" }),
      stopWhen: stepCountIs(3),
      temperature: 0,
      maxOutputTokens: 300,
    });
    expect(result.steps.map((step) => step.finishReason)).toEqual(["tool-calls", "stop"]);
    const references = sent[1]!.input.filter((item) => item.type === "item_reference");
    expect(references.length).toBeGreaterThan(0);
    // Each reference is an item step 1's kept response returned.
    const first = await new OpenAI({ apiKey: qwen.key, baseURL: `${qwen.served.url}/v1`, maxRetries: 0 }).responses.retrieve(
      String(result.steps[0]!.providerMetadata?.openai?.responseId),
    );
    for (const reference of references) expect(first.output.map((item) => item.id)).toContain(reference.id!);
  });
});

describe("item_reference", () => {
  const otherUser = () => new OpenAI({ apiKey: app.otherKey, baseURL: `${app.served.url}/v1`, maxRetries: 0 });

  test("another user's item, or an id of no kept item, is a BadRequestError naming its place in input", async () => {
    const kept = await client.responses.create({ model: "any", input: "Hello", max_output_tokens: 4, temperature: 0 });
    const reference = { type: "item_reference" as const, id: kept.output[0]!.id! };
    // Its owner may name it: the kept message is the history.
    const continued = await client.responses.create({
      model: "any",
      input: [reference, { role: "user", content: "And?" }],
      max_output_tokens: 4,
      temperature: 0,
    });
    expect(continued.status).not.toBe("failed");
    expect((await client.responses.inputItems.list(continued.id)).data.map((item) => item.id)).toContain(reference.id);
    for (const [who, id] of [
      [otherUser(), reference.id],
      [client, "msg_0123456789abcdef0123456789abcdef"],
      [client, "not-an-item"],
    ] as const) {
      const refused = await rejection(
        who.responses.create({
          model: "any",
          input: [
            { role: "user", content: "Hi" },
            { type: "item_reference", id },
          ],
        }),
      );
      expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
      expect((refused as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("input[1]");
    }
  });
});
