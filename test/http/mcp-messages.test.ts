/**
 * Anthropic's MCP connector (`mcp_servers`, beta `mcp-client-2025-04-04`) on /v1/messages through
 * `@anthropic-ai/sdk`: the same loop as Responses' mcp tools, against the real MCP server on
 * loopback, the generated model's call forced with `tool_choice`: `mcp_tool_use` and
 * `mcp_tool_result` blocks, plain and streamed, sent back as history; only listed servers.
 */
import { describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { allowSlowTests, rejection, servedDocument } from "../support";
import { HOSTILE_RESULT, servedWithMcp } from "../support/mcp";

allowSlowTests();

const { app, tools } = servedWithMcp("mcp-messages");
const client = (key = app.key) => new Anthropic({ apiKey: key, baseURL: app.served.url, maxRetries: 0 });
const BETA = "mcp-client-2025-04-04" as const;
const ask = (name: string, server: Partial<Anthropic.Beta.BetaRequestMCPServerURLDefinition> = {}) => ({
  model: "any",
  max_tokens: 64,
  temperature: 0,
  messages: [{ role: "user" as const, content: "What is the weather in Paris?" }],
  mcp_servers: [{ type: "url" as const, url: tools.url, name: "weather", ...server }],
  tool_choice: { type: "tool" as const, name },
  betas: [BETA],
});

type Block = Anthropic.Beta.BetaContentBlock;
const blocksOf = <T extends Block["type"]>(content: Block[], type: T) => content.filter((block): block is Extract<Block, { type: T }> => block.type === type);

describe("Messages' mcp_servers run in the service", () => {
  test("the call as an mcp_tool_use, its result as the mcp_tool_result after it, then the answer in words", async () => {
    const message = await client().beta.messages.create(ask("lookup"));
    expect(message.content.map((block) => block.type)).toEqual(["mcp_tool_use", "mcp_tool_result", "text"]);
    const [use] = blocksOf(message.content, "mcp_tool_use");
    expect(use).toMatchObject({ name: "lookup", server_name: "weather" });
    const { city } = use!.input as { city: string };
    expect(blocksOf(message.content, "mcp_tool_result")[0]).toEqual({
      type: "mcp_tool_result",
      tool_use_id: use!.id,
      is_error: false,
      content: [{ type: "text", text: `Sunny and 21 degrees in ${city}.`, citations: null }],
    });
    expect(message.stop_reason).toBe("end_turn");
    // The answer's turn read the result: its prompt holds the first turn's.
    const single = await client().messages.create({ model: "any", max_tokens: 1, messages: ask("lookup").messages });
    expect(message.usage.input_tokens + message.usage.cache_read_input_tokens!).toBeGreaterThan(2 * single.usage.input_tokens);
  });

  test("streamed: the mcp_tool_use's input as it is written, the result's block whole; the SDK assembles the same message", async () => {
    const stream = client().beta.messages.stream(ask("lookup"));
    const events: Anthropic.Beta.BetaRawMessageStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    const final = await stream.finalMessage();
    expect(final.content.map((block) => block.type)).toEqual(["mcp_tool_use", "mcp_tool_result", "text"]);
    const useIndex = events.findIndex((event) => event.type === "content_block_start" && event.content_block.type === "mcp_tool_use");
    const deltas = events.filter((event) => event.type === "content_block_delta" && event.delta.type === "input_json_delta");
    expect(useIndex).toBeGreaterThanOrEqual(0);
    expect(deltas.length).toBeGreaterThan(1);
    const [use] = blocksOf(final.content, "mcp_tool_use");
    expect(blocksOf(final.content, "mcp_tool_result")[0]!.tool_use_id).toBe(use!.id);
  });

  test("the reply sent back as history, with its mcp blocks, is the next turn's", async () => {
    const first = await client().beta.messages.create(ask("hostile"));
    const [result] = blocksOf(first.content, "mcp_tool_result");
    expect(result!.content).toEqual([{ type: "text", text: HOSTILE_RESULT, citations: null }]);
    const next = await client().beta.messages.create({
      ...ask("lookup"),
      tool_choice: { type: "auto" },
      messages: [
        ...ask("lookup").messages,
        { role: "assistant", content: first.content as Anthropic.Beta.BetaContentBlockParam[] },
        { role: "user", content: "Thanks!" },
      ],
    });
    expect(next.stop_reason).toBe("end_turn");
    expect(next.content.at(-1)!.type).toBe("text");
  });

  test("only listed servers, at their own URL, for the keys they allow: 400 naming the field", async () => {
    const refused = async (request: ReturnType<typeof ask>, key?: string) => {
      const error = await rejection(client(key).beta.messages.create(request));
      if (!(error instanceof Anthropic.APIError)) throw error;
      return { status: error.status, message: error.message };
    };
    expect(await refused(ask("lookup", { name: "elsewhere" }))).toMatchObject({ status: 400, message: expect.stringContaining("mcp_servers[0].name") });
    expect(await refused(ask("lookup", { url: "http://127.0.0.1:1/mcp" }))).toMatchObject({
      status: 400,
      message: expect.stringContaining("mcp_servers[0].url"),
    });
    expect(await refused(ask("lookup", { name: "alices" }), app.otherKey)).toMatchObject({
      status: 400,
      message: expect.stringContaining("mcp_servers[0].name"),
    });
  });
});

test("the message matches the served OpenAPI document", async () => {
  const { betas: _, ...body } = ask("fail");
  const response = await fetch(`${app.served.url}/v1/messages`, {
    method: "POST",
    headers: { "x-api-key": app.key, "anthropic-version": "2023-06-01", "anthropic-beta": BETA, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const message = (await response.json()) as { content: { type: string; is_error?: boolean }[] };
  expect(message.content.find((block) => block.type === "mcp_tool_result")?.is_error).toBe(true);
  (await servedDocument(app.served.url)).expectDocumented("/v1/messages", "post", 200, message);
});
