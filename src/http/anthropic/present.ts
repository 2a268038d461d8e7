/** Replies as Anthropic's Messages API shows them: the shapes are ./contract.ts's. */
import type { CompletionResult, CompletionStart } from "../../chat/completions";
import type { Usage } from "../../chat/turn-runner";
import { anthropicErrorBody } from "../errors";
import { event } from "../sse";
import type { Framing } from "../turn-driver";
import type { AnthropicMessage, MessageUsage, StopReason } from "./contract";

export const newMessageId = () => `msg_${crypto.randomUUID().replaceAll("-", "")}`;

/**
 * A reply cut by its `max_tokens` (or the generation cap, or a shutdown) ended before its natural
 * end, which `max_tokens` tells a client; one ended by a stop string of the request names it.
 */
const stopReasonOf = (result: CompletionResult): StopReason => (result.finishReason !== "stop" ? "max_tokens" : result.stopSequence !== undefined ? "stop_sequence" : "end_turn");

/** Anthropic counts input apart from what its cache read: the two add up to the prompt. */
export const usageJson = (usage: Usage): MessageUsage => ({
  input_tokens: usage.prompt_tokens - usage.cached_tokens,
  output_tokens: usage.completion_tokens,
  cache_read_input_tokens: usage.cached_tokens,
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

export const messageJson = (id: string, result: CompletionResult): AnthropicMessage => ({
  id,
  type: "message",
  role: "assistant",
  model: result.model,
  content: [{ type: "text", text: result.text, citations: null }],
  stop_reason: stopReasonOf(result),
  stop_sequence: result.stopSequence ?? null,
  usage: usageJson(result.usage),
  container: null,
  diagnostics: null,
  stop_details: null,
});

/**
 * Anthropic's stream: `message_start`, one text block (`content_block_start`, its `text_delta`s,
 * `content_block_stop`), then `message_delta` with the stop reason and usage, and `message_stop`.
 * A reasoning model's thought is not asked for (thinking blocks are not supported yet): it is left out.
 */
export const messagesFraming = (id: string): Framing<CompletionStart, CompletionResult> => ({
  start: ({ model }) => [
    event("message_start", {
      type: "message_start",
      message: { id, type: "message", role: "assistant", model, content: [], stop_reason: null, stop_sequence: null, usage: usageJson({ prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, cached_tokens: 0 }), container: null, diagnostics: null, stop_details: null },
    }),
    event("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "", citations: null } }),
  ],
  reasoning: () => [],
  delta: (text) => [event("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text } })],
  done: (result) => [
    event("content_block_stop", { type: "content_block_stop", index: 0 }),
    event("message_delta", { type: "message_delta", delta: { stop_reason: stopReasonOf(result), stop_sequence: result.stopSequence ?? null }, usage: deltaUsageJson(result.usage) }),
    event("message_stop", { type: "message_stop" }),
  ],
  error: (error) => [event("error", anthropicErrorBody(error))],
});
