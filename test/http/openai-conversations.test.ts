/**
 * OpenAI's Conversations API through the official `openai` SDK: a conversation's lifecycle and
 * items, responses answered in a conversation, and one store under both APIs: the native API's
 * turns are its items, its responses' user and assistant messages are native messages. Another
 * user's conversation is not found by any route.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { allowSlowTests, bearer, postChat, rejection, responsesWeatherTool, servedEngine } from "../support";

allowSlowTests();

const app = servedEngine("openai-conversations", { parallel: 2 });
let client: OpenAI;
let other: OpenAI;

beforeAll(() => {
  client = new OpenAI({ apiKey: app.key, baseURL: `${app.served.url}/v1`, maxRetries: 0 });
  other = new OpenAI({ apiKey: app.otherKey, baseURL: `${app.served.url}/v1`, maxRetries: 0 });
});

const weather = responsesWeatherTool;

type Item = OpenAI.Conversations.ConversationItem;
const textOf = (item: Item) => (item.type === "message" ? item.content.map((part) => ("text" in part ? part.text : "")).join("") : undefined);
const summary = (item: Item) => (item.type === "message" ? [item.role, textOf(item)] : [item.type]);

async function nativeMessages(conversationId: string) {
  const response = await fetch(`${app.served.url}/api/v1.0/chat/messages?conversation_id=${conversationId}&sort_by=id:asc`, { headers: bearer(app.key) });
  return ((await response.json()) as { data: { role: string; content: string }[] }).data.map((message) => [message.role, message.content]);
}

describe("the openai SDK's conversations", () => {
  test("create with items and metadata, retrieve, update, list items in pages, add, retrieve and delete an item, delete", async () => {
    const conversation = await client.conversations.create({
      metadata: { topic: "greetings" },
      items: [
        { type: "message", role: "developer", content: "Be brief." },
        { type: "message", role: "user", content: "Hi" },
        { type: "message", role: "assistant", content: "Hello." },
      ],
    });
    expect(conversation).toMatchObject({ object: "conversation", metadata: { topic: "greetings" } });
    expect(conversation.id).toMatch(/^conv_/);
    expect(await client.conversations.retrieve(conversation.id)).toEqual(conversation);
    expect((await client.conversations.update(conversation.id, { metadata: { topic: "more" } })).metadata).toEqual({ topic: "more" });

    const newest = await client.conversations.items.list(conversation.id);
    expect(newest.data.map(summary)).toEqual([
      ["assistant", "Hello."],
      ["user", "Hi"],
      ["developer", "Be brief."],
    ]);
    const page = await client.conversations.items.list(conversation.id, { order: "asc", limit: 2 });
    expect(page.data.map(summary)).toEqual([
      ["developer", "Be brief."],
      ["user", "Hi"],
    ]);
    expect(page.has_more).toBe(true);
    expect((await page.getNextPage()).data.map(summary)).toEqual([["assistant", "Hello."]]);

    const added = await client.conversations.items.create(conversation.id, { items: [{ type: "message", role: "user", content: "Tell me more" }] });
    expect(added.data.map(summary)).toEqual([["user", "Tell me more"]]);
    const id = added.data[0]!.id as string;
    expect(await client.conversations.items.retrieve(id, { conversation_id: conversation.id })).toEqual(added.data[0]!);
    // The native API lists its user and assistant messages, not the developer message.
    expect(await nativeMessages(conversation.id)).toEqual([
      ["user", "Hi"],
      ["assistant", "Hello."],
      ["user", "Tell me more"],
    ]);

    expect((await client.conversations.items.delete(id, { conversation_id: conversation.id })).id).toBe(conversation.id);
    expect(await rejection(client.conversations.items.retrieve(id, { conversation_id: conversation.id }))).toBeInstanceOf(OpenAI.NotFoundError);
    expect(await client.conversations.delete(conversation.id)).toEqual({ id: conversation.id, object: "conversation.deleted", deleted: true });
    expect(await rejection(client.conversations.retrieve(conversation.id))).toBeInstanceOf(OpenAI.NotFoundError);
  });

  test("responses in a conversation: its items grow by each response's input and output, the native API continues it, and each turn reuses the cache", async () => {
    const conversation = await client.conversations.create();
    const first = await client.responses.create({ model: "any", conversation: conversation.id, input: "Hello", temperature: 0 });
    expect(first.conversation).toEqual({ id: conversation.id });
    const items = await client.conversations.items.list(conversation.id, { order: "asc" });
    expect(items.data.map(summary)).toEqual([
      ["user", "Hello"],
      ["assistant", first.output_text],
    ]);
    // The response's output items are the conversation's.
    expect(items.data[1]!.id).toBe(first.output[0]!.id);

    const native = await postChat(app.served.url, app.key, { message: "Tell me more", conversation_id: conversation.id, temperature: 0 });
    expect(native.status).toBe(200);
    const nativeReply = ((await native.json()) as { message: { content: string } }).message.content;
    const second = await client.responses.create({ model: "any", conversation: { id: conversation.id }, input: "Thanks", temperature: 0 });
    expect(second.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(first.usage!.input_tokens);
    expect(await nativeMessages(conversation.id)).toEqual([
      ["user", "Hello"],
      ["assistant", first.output_text],
      ["user", "Tell me more"],
      ["assistant", nativeReply],
      ["user", "Thanks"],
      ["assistant", second.output_text],
    ]);
    // The same history as chat completions give it, the conversation's turns in order.
    const stateless = await client.chat.completions.create({
      model: "any",
      temperature: 0,
      messages: [
        { role: "user", content: "Hello" },
        { role: "assistant", content: first.output_text },
        { role: "user", content: "Tell me more" },
        { role: "assistant", content: nativeReply },
        { role: "user", content: "Thanks" },
      ],
    });
    expect(second.output_text).toBe(stateless.choices[0]!.message.content!);

    const listed = await fetch(`${app.served.url}/api/v1.0/chat/conversations`, { headers: bearer(app.key) });
    expect(((await listed.json()) as { data: { conversation_id: string }[] }).data.map((row) => row.conversation_id)).toContain(conversation.id);

    // Deleted with the native API: its responses go with it.
    expect((await fetch(`${app.served.url}/api/v1.0/chat/conversations/${conversation.id}`, { method: "DELETE", headers: bearer(app.key) })).status).toBe(204);
    for (const response of [first, second]) expect(await rejection(client.responses.retrieve(response.id))).toBeInstanceOf(OpenAI.NotFoundError);
  });

  test("a function call round trip in a conversation: the call and its output are items the native API does not list", async () => {
    const conversation = await client.conversations.create();
    const first = await client.responses.create({
      model: "any",
      conversation: conversation.id,
      input: "What is the weather in Paris?",
      tools: [weather],
      tool_choice: "required",
      temperature: 0,
    });
    const call = first.output.find((item) => item.type === "function_call");
    if (call?.type !== "function_call") throw new Error("a function call was expected");
    const second = await client.responses.create({
      model: "any",
      conversation: conversation.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: '{"temperature": 21}' }],
      tools: [weather],
      temperature: 0,
    });
    expect(second.output_text.length).toBeGreaterThan(0);
    const items = await client.conversations.items.list(conversation.id, { order: "asc" });
    expect(items.data.map((item) => item.type)).toEqual(["message", "function_call", "function_call_output", "message"]);
    expect(items.data[1]).toMatchObject({ id: call.id, call_id: call.call_id, name: "get_weather", arguments: call.arguments });
    expect((await nativeMessages(conversation.id)).map(([role]) => role)).toEqual(["user", "assistant"]);
  });

  test("streamed in a conversation: the streamed items are the conversation's", async () => {
    const conversation = await client.conversations.create();
    const final = await client.responses.stream({ model: "any", conversation: conversation.id, input: "Hello", temperature: 0 }).finalResponse();
    const [, answer] = (await client.conversations.items.list(conversation.id, { order: "asc" })).data;
    expect(answer!.id).toBe(final.output[0]!.id);
    expect(textOf(answer!)).toBe(final.output_text);
  });

  test("refused: a conversation and a previous response together, continuing a conversation's response as a chain, an unknown conversation", async () => {
    const conversation = await client.conversations.create();
    const inside = await client.responses.create({ model: "any", conversation: conversation.id, input: "Hello", max_output_tokens: 4 });
    const alone = await client.responses.create({ model: "any", input: "Hello", max_output_tokens: 4 });
    const both = await rejection(client.responses.create({ model: "any", conversation: conversation.id, previous_response_id: alone.id, input: "Hi" }));
    expect(both).toBeInstanceOf(OpenAI.BadRequestError);
    expect((both as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("conversation");
    const chained = await rejection(client.responses.create({ model: "any", previous_response_id: inside.id, input: "Hi" }));
    expect((chained as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("previous_response_id");
    expect(await rejection(client.responses.create({ model: "any", conversation: "conv_none", input: "Hi" }))).toBeInstanceOf(OpenAI.NotFoundError);
  });

  test("another user's conversation is not found by any route, and is left as it was", async () => {
    const conversation = await client.conversations.create({ items: [{ type: "message", role: "user", content: "Mine" }] });
    const [item] = (await client.conversations.items.list(conversation.id)).data;
    const attempts: Promise<unknown>[] = [
      other.conversations.retrieve(conversation.id),
      other.conversations.update(conversation.id, { metadata: { x: "y" } }),
      other.conversations.delete(conversation.id),
      other.conversations.items.list(conversation.id),
      other.conversations.items.create(conversation.id, { items: [{ type: "message", role: "user", content: "Theirs" }] }),
      other.conversations.items.retrieve(item!.id as string, { conversation_id: conversation.id }),
      other.conversations.items.delete(item!.id as string, { conversation_id: conversation.id }),
      other.responses.create({ model: "any", conversation: conversation.id, input: "Hi" }),
    ];
    for (const attempt of attempts) expect(await rejection(attempt)).toBeInstanceOf(OpenAI.NotFoundError);
    expect((await client.conversations.items.list(conversation.id)).data.map(summary)).toEqual([["user", "Mine"]]);
    expect((await client.conversations.retrieve(conversation.id)).metadata).toEqual({});
  });
});
