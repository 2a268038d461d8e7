/** Replies as Anthropic's Messages API shows them: the shapes are ./contract.ts's. */
import type { CompletionResult, CompletionStart } from "../../chat/completions";
import { replyItemId, stepStem } from "../../chat/items";
import type { LoopResult } from "../../chat/server-tools";
import type { ModelInfo, Usage } from "../../chat/turn-runner";
import type { ConversationItem } from "../../db/types";
import { InvalidInput } from "../../errors";
import type { ToolCall } from "../../llm/engine";
import { anthropicErrorBody } from "../errors";
import { event, type SseChunk } from "../sse";
import type { Framing } from "../turn-driver";
import type { AnthropicMessage, AnthropicModel, AnthropicModelList, MessageUsage, StopReason } from "./contract";

type Block = "thinking" | "text" | "tool_use";

export const newMessageId = () => `msg_${crypto.randomUUID().replaceAll("-", "")}`;

/**
 * A reply cut by its `max_tokens` (or the generation cap, or a shutdown) ended before its natural
 * end, which `max_tokens` tells a client; one ended by a stop string of the request names it.
 */
const stopReasonOf = (result: CompletionResult): StopReason =>
  result.finishReason !== "stop" ? "max_tokens" : result.toolCalls ? "tool_use" : result.stopSequence !== undefined ? "stop_sequence" : "end_turn";

const toolUseJson = (call: ToolCall) => ({
  type: "tool_use" as const,
  id: call.id,
  name: call.name,
  input: JSON.parse(call.arguments) as Record<string, unknown>,
  caller: { type: "direct" as const },
});

/** Anthropic counts input apart from what its cache read: the two add up to the prompt. */
const usageJson = (usage: Usage): MessageUsage => ({
  input_tokens: usage.promptTokens - usage.cachedTokens,
  output_tokens: usage.completionTokens,
  cache_read_input_tokens: usage.cachedTokens,
  cache_creation_input_tokens: 0,
  cache_creation: null,
  inference_geo: null,
  output_tokens_details: null,
  server_tool_use: null,
  service_tier: "standard",
  speed: null,
});

/** `message_delta`'s usage: the counts only. */
const deltaUsageJson = (usage: Usage) => {
  const { input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens } = usageJson(usage);
  return { input_tokens, output_tokens, cache_read_input_tokens, cache_creation_input_tokens, output_tokens_details: null, server_tool_use: null };
};

/** A thought's block: Parley signs none, so its signature is empty. */
const thinkingJson = (thinking: string) => ({ type: "thinking" as const, thinking, signature: "" });

type Content = AnthropicMessage["content"][number];
type ServerCall = Extract<ConversationItem, { type: "serverCall" }>;

const mcpToolUseJson = (id: string, call: Pick<ServerCall, "name" | "server" | "arguments">): Content => ({
  type: "mcp_tool_use",
  id,
  name: call.name,
  server_name: call.server,
  input: JSON.parse(call.arguments) as Record<string, unknown>,
});

/** A call's result, or why it has none, as its text: data, whatever it holds. */
const mcpToolResultJson = (call: ServerCall): Extract<Content, { type: "mcp_tool_result" }> => ({
  type: "mcp_tool_result",
  tool_use_id: call.id,
  is_error: call.error !== null,
  content: [{ type: "text", text: call.output ?? call.error?.message ?? "", citations: null }],
});

/** The blocks of a reply that ran MCP servers' tools: every model turn's, in order, each call with its result. */
function loopContent(items: readonly ConversationItem[], shown: boolean): Content[] {
  return items.flatMap((item): Content[] => {
    switch (item.type) {
      case "thought":
        return [thinkingJson(shown ? item.text : "")];
      case "message":
        return [{ type: "text", text: item.text, citations: null }];
      case "toolCall":
        return [toolUseJson({ id: item.callId, name: item.name, arguments: item.arguments })];
      case "serverCall":
        return [mcpToolUseJson(item.id, item), mcpToolResultJson(item)];
      default:
        return [];
    }
  });
}

/** @param shown whether a reasoning model's thought shows its text */
export const messageJson = (id: string, result: CompletionResult | LoopResult, shown: boolean): AnthropicMessage => ({
  id,
  type: "message",
  role: "assistant",
  model: result.model,
  // The thought, if any; the text block, unless the reply is only calls; the calls. A reply that ran servers' tools: every turn's, in order.
  content:
    "items" in result
      ? loopContent(result.items, shown)
      : [
          ...(result.reasoning !== undefined ? [thinkingJson(shown ? result.reasoning : "")] : []),
          ...(result.text !== "" || !result.toolCalls ? [{ type: "text" as const, text: result.text, citations: null }] : []),
          ...(result.toolCalls ?? []).map(toolUseJson),
        ],
  stop_reason: stopReasonOf(result),
  stop_sequence: result.stopSequence ?? null,
  usage: usageJson(result.usage),
  container: null,
  diagnostics: null,
  stop_details: null,
});

const PING = event("ping", { type: "ping" });

/**
 * Anthropic's stream: `message_start` (once the prompt is evaluated, so that its usage counts it,
 * as the message's does) and a `ping`, then each block in turn
 * (`content_block_start`, its deltas, `content_block_stop`): a reasoning model's thought
 * (`thinking_delta`s, none when its text is not `shown`), the answer's text, then each tool call
 * with its input as JSON text; then `message_delta` with the stop reason and usage, and
 * `message_stop`. `ping` events keep a silent stream alive, as Anthropic's do.
 */
export function messagesFraming(id: string, shown: boolean, stem = ""): Framing<CompletionStart, CompletionResult> {
  let index = -1;
  /** The stem of the items of the model turn now running, when the reply runs MCP servers' tools. */
  let turnStem = stem;
  let open: Block | undefined;
  const close = (): SseChunk[] => {
    if (open === undefined) return [];
    open = undefined;
    return [event("content_block_stop", { type: "content_block_stop", index })];
  };
  // A text or tool_use block began: the reply has its answer's block.
  let answered = false;
  const begin = (block: object, kind: Block): SseChunk[] => {
    const closed = close();
    open = kind;
    if (kind !== "thinking") answered = true;
    return [...closed, event("content_block_start", { type: "content_block_start", index: ++index, content_block: block })];
  };
  const text = (): SseChunk[] => (open === "text" ? [] : begin({ type: "text", text: "", citations: null }, "text"));
  let model = "";
  let started = false;
  /** `message_start`, once: at the prompt, or before whatever comes first without one (an empty or failed reply). */
  const startMessage = (promptTokens = 0, cachedTokens = 0): SseChunk[] => {
    if (started) return [];
    started = true;
    const usage = usageJson({ promptTokens, completionTokens: 0, cachedTokens, reasoningTokens: 0 });
    return [
      event("message_start", {
        type: "message_start",
        message: {
          id,
          type: "message",
          role: "assistant",
          model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage,
          container: null,
          diagnostics: null,
          stop_details: null,
        },
      }),
      PING,
    ];
  };
  return {
    start: (start) => {
      model = start.model;
      return [];
    },
    prompt: ({ promptTokens, cachedTokens }) => startMessage(promptTokens, cachedTokens),
    // Before message_start, only a comment: Anthropic's stream opens with message_start.
    ping: () => (started ? PING : undefined),
    reasoning: (thought) => [
      ...(open === "thinking" ? [] : begin(thinkingJson(""), "thinking")),
      ...(shown ? [event("content_block_delta", { type: "content_block_delta", index, delta: { type: "thinking_delta", thinking: thought } })] : []),
    ],
    delta: (delta) => [...text(), event("content_block_delta", { type: "content_block_delta", index, delta: { type: "text_delta", text: delta } })],
    serverTool: (tool) => {
      switch (tool.event) {
        case "step":
          turnStem = stepStem(stem, tool.step);
          return close();
        case "call": {
          const { part } = tool;
          if (part.part === "open")
            return begin(
              { type: "mcp_tool_use", id: replyItemId(turnStem, "serverCall", part.index), name: part.name, server_name: tool.server, input: {} },
              "tool_use",
            );
          if (part.part === "arguments")
            return [event("content_block_delta", { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: part.text } })];
          return close();
        }
        case "item":
          return tool.item.type === "serverCall" ? [...begin(mcpToolResultJson(tool.item), "tool_use"), ...close()] : [];
      }
    },
    toolCall: (part) => {
      if (part.part === "open") return begin({ type: "tool_use", id: part.id, name: part.name, input: {}, caller: { type: "direct" } }, "tool_use");
      if (part.part === "arguments")
        return [event("content_block_delta", { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: part.text } })];
      return close();
    },
    done: (result) => [
      ...startMessage(),
      // A reply with no text and no call still has its (empty) text block, as when not streamed.
      ...(answered ? [] : text()),
      ...close(),
      event("message_delta", {
        type: "message_delta",
        delta: { stop_reason: stopReasonOf(result), stop_sequence: result.stopSequence ?? null },
        usage: deltaUsageJson(result.usage),
      }),
      event("message_stop", { type: "message_stop" }),
    ],
    error: (error) => [...startMessage(), event("error", anthropicErrorBody(error))],
  };
}

export const anthropicModelJson = (model: ModelInfo): AnthropicModel => ({
  type: "model",
  id: model.id,
  display_name: model.id,
  created_at: new Date(model.created * 1000).toISOString(),
});

/** A page of the models, as Anthropic's Models API pages them: `limit` of them after `after_id`, or before `before_id`. */
export function anthropicModelPage(models: readonly ModelInfo[], query: { limit?: number; after_id?: string; before_id?: string }): AnthropicModelList {
  const { limit = 20, after_id, before_id } = query;
  if (after_id !== undefined && before_id !== undefined) throw new InvalidInput("before_id", "send after_id or before_id, not both");
  const indexOf = (id: string, param: string) => {
    const index = models.findIndex((model) => model.id === id);
    if (index < 0) throw new InvalidInput(param, `no model ${JSON.stringify(id)}`);
    return index;
  };
  const to = before_id === undefined ? undefined : indexOf(before_id, "before_id");
  const from = to !== undefined ? Math.max(0, to - limit) : after_id === undefined ? 0 : indexOf(after_id, "after_id") + 1;
  const page = models.slice(from, to ?? from + limit);
  const more = to !== undefined ? from > 0 : from + page.length < models.length;
  return { data: page.map(anthropicModelJson), first_id: page[0]?.id ?? null, last_id: page.at(-1)?.id ?? null, has_more: more };
}
