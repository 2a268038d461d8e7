/**
 * Tools that run inside the service on the native chat API (issue #68): a turn names listed MCP
 * servers (`tools`), the generated model's call forced with `tool_choice`; the loop runs in the
 * service, the calls and their results stored with the conversation as data, plain and streamed.
 */
import { describe, expect, test } from "bun:test";
import type { ChatReply, ChatToolCall, ChatToolCallStart } from "../../src/http/contract";
import type { Turn } from "../../src/llm/engine";
import { allowSlowTests, bearer, postChat, readSse, servedDocument } from "../support";
import { HOSTILE_RESULT, servedWithMcp } from "../support/mcp";

allowSlowTests();

const { app, tools } = servedWithMcp("mcp-chat");

const weather = (conversation: string, name: string, more: Record<string, unknown> = {}) => ({
  conversation_id: conversation,
  message: "What is the weather in Paris?",
  tools: ["weather"],
  tool_choice: { name },
  temperature: 0,
  max_tokens: 128,
  ...more,
});

async function chat(
  body: Record<string, unknown>,
  key = app.key,
): Promise<{ status: number; body: ChatReply & { error?: { param?: string; message: string } } }> {
  const response = await postChat(app.served.url, key, body);
  return { status: response.status, body: (await response.json()) as ChatReply & { error?: { param?: string; message: string } } };
}

async function listed(conversation: string): Promise<{ role: string; content: string }[]> {
  const response = await fetch(`${app.served.url}/api/v1.0/chat/messages?conversation_id=${conversation}&sort_by=id:asc`, { headers: bearer(app.key) });
  return ((await response.json()) as { data: { role: string; content: string }[] }).data;
}

describe("the native chat API runs listed MCP servers' tools", () => {
  test("plain: the forced call made on the server, its result fed back, the reply in words; calls kept with the conversation", async () => {
    const before = tools.calls.length;
    const { status, body } = await chat(weather("mcp-plain", "lookup"));
    expect(status).toBe(200);
    const [call] = body.tool_calls!;
    expect(call).toMatchObject({ server: "weather", name: "lookup", error: null });
    const { city } = JSON.parse(call!.arguments) as { city: string };
    expect(call!.output).toBe(`Sunny and 21 degrees in ${city}.`);
    expect(tools.calls.slice(before).map((made) => [made.name, made.city])).toContainEqual(["lookup", city]);
    expect(body.message.content).toMatch(/\w/);
    // The listing shows the turn's user and assistant messages; the calls are stored beside them.
    expect((await listed("mcp-plain")).map((message) => message.role)).toEqual(["user", "assistant"]);
    const items = await fetch(`${app.served.url}/v1/conversations/mcp-plain/items?order=asc`, { headers: bearer(app.key) });
    const kept = ((await items.json()) as { data: { type: string; id: string; output?: string }[] }).data;
    expect(kept.map((item) => item.type)).toEqual(["message", "mcp_list_tools", "mcp_call", "message"]);
    expect(kept[2]).toMatchObject({ id: call!.id, output: call!.output });
    // A follow-up sees the call: its prompt holds the first turn and the call's result.
    const followUp = (conversation: string) => chat({ conversation_id: conversation, message: "And tomorrow?", temperature: 0, max_tokens: 8 });
    const next = await followUp("mcp-plain");
    expect(next.status).toBe(200);
    expect(next.body.tool_calls).toBeUndefined();
    const asked = { role: "user" as const, content: "What is the weather in Paris?" };
    const answered = { role: "assistant" as const, content: body.message.content };
    const measured = async (turns: Turn[]) => {
      const prompt = await app.engine.measure({
        history: [...turns, { role: "user", content: "And tomorrow?" }],
        maxTokens: 8,
        cacheScope: "1",
        conversationKey: "x",
      });
      prompt.release();
      return prompt.tokens;
    };
    const calledTurns: Turn[] = [
      asked,
      { role: "assistant", content: "", toolCalls: [{ id: call!.id, name: "lookup", arguments: call!.arguments }] },
      { role: "tool", content: call!.output!, toolCallId: call!.id },
      answered,
    ];
    expect(next.body.usage.prompt_tokens).toBe(await measured(calledTurns));
    expect(next.body.usage.prompt_tokens).toBeGreaterThan(await measured([asked, answered]));
  });

  test("streamed: tool_call as written, tool_result once made, the deltas the reply's text; done is the stored reply", async () => {
    const response = await postChat(app.served.url, app.key, { ...weather("mcp-streamed", "lookup"), stream: true });
    expect(response.status).toBe(200);
    const events: { event: string; data: unknown }[] = [];
    for await (const event of readSse(response)) if (event.event !== "comment") events.push(event);
    const names = events.map((event) => event.event);
    expect(names[0]).toBe("start");
    expect(names.at(-1)).toBe("done");
    const started = events.find((event) => event.event === "tool_call")!.data as ChatToolCallStart;
    const made = events.find((event) => event.event === "tool_result")!.data as ChatToolCall;
    expect(names.indexOf("tool_call")).toBeLessThan(names.indexOf("tool_result"));
    expect(made).toEqual({ ...started, output: `Sunny and 21 degrees in ${(JSON.parse(started.arguments) as { city: string }).city}.`, error: null });
    const done = events.at(-1)!.data as ChatReply;
    expect(done.tool_calls).toEqual([made]);
    const deltas = events.flatMap((event) => (event.event === "delta" ? [(event.data as { content: string }).content] : []));
    expect(deltas.join("")).toBe(done.message.content);
    expect((await listed("mcp-streamed")).at(-1)).toMatchObject({ role: "assistant", content: done.message.content });
  });

  test("a tool that errors, and a hostile result, are the call's outcome as data for the model", async () => {
    const failed = await chat(weather("mcp-fail", "fail"));
    expect(failed.body.tool_calls).toEqual([
      expect.objectContaining({ name: "fail", output: null, error: { type: "tool", message: "the weather service is down" } }),
    ]);
    const hostile = await chat(weather("mcp-hostile", "hostile"));
    expect(hostile.body.tool_calls!.map((call) => call.output)).toEqual([HOSTILE_RESULT]);
    expect((await listed("mcp-hostile")).map((message) => message.role)).toEqual(["user", "assistant"]);
  });

  test("only listed servers, for the caller: anything else is a 422 naming the field (the native API's invalid_request), a server down 424, before anything is stored", async () => {
    const refused = async (body: Record<string, unknown>, key = app.key) => {
      const { status, body: answer } = await chat({ conversation_id: "mcp-refused", message: "Hi", ...body }, key);
      return { status, param: answer.error?.param, message: answer.error?.message };
    };
    expect(await refused({ tools: ["nowhere"] })).toMatchObject({ status: 422, param: "tools[0]" });
    expect(await refused({ tools: ["weather", "alices"] }, app.otherKey)).toMatchObject({ status: 422, param: "tools[1]" });
    expect(await refused({ tools: ["weather", "weather"] })).toMatchObject({ status: 422, param: "tools[1]" });
    expect(await refused({ tool_choice: "required" })).toMatchObject({ status: 422, param: "tool_choice" });
    expect(await refused({ tools: ["weather"], tool_choice: { name: "nothing" } })).toMatchObject({ status: 422, param: "tool_choice" });
    expect(await refused({ tools: "weather" })).toMatchObject({ status: 422, param: "tools" });
    const down = await refused({ tools: ["down"], stream: true });
    expect(down).toMatchObject({ status: 424 });
    expect(down.message).toContain('MCP server "down" did not list its tools');
    expect(await listed("mcp-refused")).toEqual([]);
  });

  test("the bodies match the served OpenAPI document, the stream's events too", async () => {
    const document = await servedDocument(app.served.url);
    const { body } = await chat(weather("mcp-documented", "lookup"));
    document.expectDocumented("/api/v1.0/chat", "post", 200, body);
    const response = await postChat(app.served.url, app.key, { ...weather("mcp-documented", "lookup"), stream: true });
    const seen = new Set<string>();
    for await (const { event, data } of readSse(response)) {
      if (event === "comment") continue;
      seen.add(event);
      document.expectValid(
        document.schemaAt("paths", "/api/v1.0/chat", "post", "responses", "200", "content", "text/event-stream", "x-events", event),
        data,
        event,
      );
    }
    expect([...seen]).toEqual(expect.arrayContaining(["start", "tool_call", "tool_result", "done"]));
  });
});
