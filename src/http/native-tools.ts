/**
 * The native chat API's tools: a turn names listed MCP servers by label (`tools`), whose tools
 * the service runs itself (chat/server-tools.ts), and a stream tells each call as the model writes
 * it and once made. The calls' outputs are data: they reach the client as strings, never parsed.
 */
import { t } from "elysia";
import { newStem, replyItemId, stepStem } from "../chat/items";
import type { Caller, ServerTools } from "../chat/server-tools";
import type { ServerCall } from "../chat/service";
import type { TurnServerTool } from "../chat/turn-runner";
import { InvalidInput } from "../errors";
import type { ChatToolCall } from "./contract";
import { event, type SseChunk } from "./sse";

const MAX_SERVERS = 16;
const TOOLS_RULE = `tools must be an array of up to ${MAX_SERVERS} labels of MCP servers the operator lists`;
const TOOL_CHOICE_RULE = 'tool_choice must be "auto", "none", "required" or {"name": a tool of the servers named}';

export const NATIVE_TOOL_FIELDS = {
  tools: t.Optional(t.Array(t.String({ minLength: 1, maxLength: 128 }), { maxItems: MAX_SERVERS, error: TOOLS_RULE })),
  tool_choice: t.Optional(
    t.Union([t.Literal("auto"), t.Literal("none"), t.Literal("required"), t.Object({ name: t.String({ minLength: 1, maxLength: 128 }) })], {
      error: TOOL_CHOICE_RULE,
    }),
  ),
};

type ToolFields = { tools?: string[] | undefined; tool_choice?: "auto" | "none" | "required" | { name: string } | undefined };

/** The servers a turn names, each as the service runs it for the native API: all its tools, no approval asked. */
export function nativeServerTools(body: ToolFields, caller: Caller): (ServerTools & { stem: string }) | undefined {
  const labels = body.tools ?? [];
  const choice = body.tool_choice;
  if (labels.length === 0) {
    if (choice !== undefined && choice !== "auto" && choice !== "none")
      throw new InvalidInput({ part: "toolChoice" }, "tool_choice asks for a call, but tools names no MCP server");
    return undefined;
  }
  for (const [index, label] of labels.entries())
    if (labels.indexOf(label) !== index)
      throw new InvalidInput({ part: "serverTool", index, detail: "label" }, `names MCP server ${JSON.stringify(label)} twice`);
  return {
    stem: newStem(),
    caller,
    ...(choice === "none" ? { none: true } : {}),
    ...(choice === "required" ? { choice: {} } : typeof choice === "object" ? { choice: { name: choice.name } } : {}),
    uses: labels.map((label, index) => ({ index, label, headers: {}, approval: { always: false, except: [] } })),
  };
}

/** A call made, as the reply and the stream show it. */
export const toolCallJson = ({ id, server, name, arguments: args, output, error }: ServerCall): ChatToolCall => ({
  id,
  server,
  name,
  arguments: args,
  output,
  error: error && { type: error.kind, message: error.message },
});

/**
 * The stream's events of a turn's server tools, its items named as they are stored: `tool_call`
 * once the model has written a call, `tool_result` once it is made.
 */
export function toolEvents(stem: string | undefined): (tool: TurnServerTool) => SseChunk[] {
  let turnStem = stem ?? "";
  return (tool) => {
    switch (tool.event) {
      case "step":
        turnStem = stepStem(stem ?? "", tool.step);
        return [];
      case "call": {
        const { part } = tool;
        if (part.part !== "close") return [];
        const { name, arguments: args } = part.call;
        return [event("tool_call", { id: replyItemId(turnStem, "serverCall", part.index), server: tool.server, name, arguments: args })];
      }
      case "item":
        return tool.item.type === "serverCall" ? [event("tool_result", toolCallJson(tool.item))] : [];
    }
  };
}
