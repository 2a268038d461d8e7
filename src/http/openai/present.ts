/** Completions as OpenAI's API shows them: the shapes are ./contract.ts's. */
import type { CompletionResult, CompletionStart } from "../../chat/completions";
import type { EmbedResult } from "../../chat/retrieval";
import type { ModelInfo, Usage } from "../../chat/turn-runner";
import type { FinishReason, TokenLogprob, ToolCall } from "../../llm/engine";
import { openAiErrorBody } from "../errors";
import { data, type SseChunk } from "../sse";
import type { Framing } from "../turn-driver";
import type {
  ChatCompletion,
  ChatCompletionChunk,
  CompletionUsage,
  OPENAI_FINISH_REASONS,
  OpenAiEmbeddingList,
  OpenAiModel,
  TextCompletion,
  TextLogprobs,
} from "./contract";

type OpenAiFinishReason = (typeof OPENAI_FINISH_REASONS)[number];

/** What every chunk of one completion repeats. */
export interface CompletionIdentity {
  id: string;
  /** Unix seconds. */
  created: number;
}

/** A chat completion's identity (`chatcmpl-`), or a legacy completion's (`cmpl-`). */
export const newCompletion = (prefix: "chatcmpl" | "cmpl" = "chatcmpl"): CompletionIdentity => ({
  id: `${prefix}-${crypto.randomUUID().replaceAll("-", "")}`,
  created: Math.floor(Date.now() / 1000),
});

/**
 * OpenAI has no finish reason for a reply cut by a shutdown (the generation cap already reports
 * `length`): it ended before its natural end, which is what `length` tells a client. A reply that
 * ended by itself after calling tools ends for them.
 */
const finishReason = (reason: FinishReason, calls: boolean): OpenAiFinishReason => (reason !== "stop" ? "length" : calls ? "tool_calls" : "stop");

const logprobsJson = (entries: readonly TokenLogprob[]) => ({
  content: entries.map(({ token, logprob, bytes, top }) => ({
    token,
    logprob,
    bytes,
    top_logprobs: top.map((other) => ({ token: other.token, logprob: other.logprob, bytes: other.bytes })),
  })),
  refusal: null,
});

const toolCallJson = (call: ToolCall) => ({ id: call.id, type: "function" as const, function: { name: call.name, arguments: call.arguments } });

const usageJson = (usage: Usage): CompletionUsage => ({
  prompt_tokens: usage.promptTokens,
  completion_tokens: usage.completionTokens,
  total_tokens: usage.promptTokens + usage.completionTokens,
  prompt_tokens_details: { cached_tokens: usage.cachedTokens },
});

export const completionJson = ({ id, created }: CompletionIdentity, result: CompletionResult): ChatCompletion => ({
  id,
  object: "chat.completion",
  created,
  model: result.model,
  choices: [
    {
      index: 0,
      message: {
        role: "assistant",
        // OpenAI's content is null beside calls when the model said nothing before them.
        content: result.toolCalls && result.text === "" ? null : result.text,
        refusal: null,
        ...(result.reasoning !== undefined ? { reasoning_content: result.reasoning } : {}),
        ...(result.toolCalls ? { tool_calls: result.toolCalls.map(toolCallJson) } : {}),
      },
      logprobs: result.logprobs ? logprobsJson(result.logprobs) : null,
      finish_reason: finishReason(result.finishReason, result.toolCalls !== undefined),
    },
  ],
  usage: usageJson(result.usage),
});

/**
 * The stream as OpenAI writes it: the role, content deltas, the finish reason, the usage when
 * asked for (`usage: null` on every chunk before it), then `[DONE]`. A reasoning model's thought
 * comes first, as `reasoning_content` deltas (llama-server's and DeepSeek's field). Each tool
 * call's id, type and name come in one chunk, then its arguments in fragments, as OpenAI's chunks
 * carry them.
 */
export function completionFraming(identity: CompletionIdentity, includeUsage: boolean): Framing<CompletionStart, CompletionResult> {
  let model = "";
  const chunk = (choices: ChatCompletionChunk["choices"], usage?: CompletionUsage): ChatCompletionChunk => ({
    id: identity.id,
    object: "chat.completion.chunk",
    created: identity.created,
    model,
    choices,
    ...(includeUsage ? { usage: usage ?? null } : {}),
  });
  const choice = (delta: ChatCompletionChunk["choices"][number]["delta"], reason: OpenAiFinishReason | null = null): ChatCompletionChunk["choices"] => [
    { index: 0, delta, logprobs: null, finish_reason: reason },
  ];
  return {
    start: (start) => {
      model = start.model;
      return [data(chunk(choice({ role: "assistant", content: "" })))];
    },
    reasoning: (text) => [data(chunk(choice({ reasoning_content: text })))],
    delta: (content) => [data(chunk(choice({ content })))],
    // In chunks of their own, after the content they belong to, as its text is given.
    logprobs: (entries) => [data(chunk([{ index: 0, delta: {}, logprobs: logprobsJson(entries), finish_reason: null }]))],
    toolCall: (part) => {
      const { index } = part;
      switch (part.part) {
        case "open":
          return [data(chunk(choice({ tool_calls: [{ index, id: part.id, type: "function", function: { name: part.name, arguments: "" } }] })))];
        case "arguments":
          return [data(chunk(choice({ tool_calls: [{ index, function: { arguments: part.text } }] })))];
        case "close":
          return [];
      }
    },
    done: (result) => [
      data(chunk(choice({}, finishReason(result.finishReason, result.toolCalls !== undefined)))),
      ...(includeUsage ? [data(chunk([], usageJson(result.usage)))] : []),
      data("[DONE]"),
    ],
    error: (error) => [data(openAiErrorBody(error))],
  };
}

/** What a legacy completion's choice starts with (`echo`: its prompt), and the tokens' log-probabilities it tells. */
export interface TextOptions {
  echoed: string;
  logprobs: boolean;
}

/** Legacy log-probabilities of `entries`, the first starting at `offset` of the choice's text. */
function textLogprobs(entries: readonly TokenLogprob[], offset: number): TextLogprobs {
  const starts: number[] = [];
  let at = offset;
  for (const { token } of entries) {
    starts.push(at);
    at += token.length;
  }
  return {
    tokens: entries.map((entry) => entry.token),
    token_logprobs: entries.map((entry) => entry.logprob),
    top_logprobs: entries.map((entry) => Object.fromEntries(entry.top.map((other) => [other.token, other.logprob]))),
    text_offset: starts,
  };
}

/** A text completion's finish reason: as a chat completion's, with no tool calls. */
const textFinish = (reason: FinishReason) => finishReason(reason, false) as "stop" | "length";

export const textCompletionJson = ({ id, created }: CompletionIdentity, result: CompletionResult, { echoed, logprobs }: TextOptions): TextCompletion => ({
  id,
  object: "text_completion",
  created,
  model: result.model,
  choices: [
    {
      text: echoed + result.text,
      index: 0,
      logprobs: logprobs ? textLogprobs(result.logprobs ?? [], echoed.length) : null,
      finish_reason: textFinish(result.finishReason),
    },
  ],
  usage: usageJson(result.usage),
});

/** A legacy completion's stream: text chunks (the echoed prompt first), their log-probabilities in chunks of their own, one with the finish reason, the usage when asked, `[DONE]`. */
export function textCompletionFraming(
  identity: CompletionIdentity,
  includeUsage: boolean,
  { echoed, logprobs }: TextOptions,
): Framing<CompletionStart, CompletionResult> {
  let model = "";
  // Where the next token's text starts in the choice's: the answer's tokens spell its text in order.
  let offset = echoed.length;
  const chunk = (choices: TextCompletion["choices"], usage?: CompletionUsage): TextCompletion => ({
    id: identity.id,
    object: "text_completion",
    created: identity.created,
    model,
    choices,
    ...(includeUsage ? { usage: usage ?? null } : {}),
  });
  const text = (content: string): SseChunk => data(chunk([{ text: content, index: 0, logprobs: null, finish_reason: null }]));
  return {
    start: (start) => {
      model = start.model;
      return echoed === "" ? [] : [text(echoed)];
    },
    reasoning: () => [],
    delta: (content) => [text(content)],
    logprobs: (entries) => {
      if (!logprobs) return [];
      const told = textLogprobs(entries, offset);
      for (const entry of entries) offset += entry.token.length;
      return [data(chunk([{ text: "", index: 0, logprobs: told, finish_reason: null }]))];
    },
    done: (result) => [
      data(chunk([{ text: "", index: 0, logprobs: null, finish_reason: textFinish(result.finishReason) }])),
      ...(includeUsage ? [data(chunk([], usageJson(result.usage)))] : []),
      data("[DONE]"),
    ],
    error: (error) => [data(openAiErrorBody(error))],
  };
}

export const modelJson = (model: ModelInfo): OpenAiModel => ({
  id: model.id,
  object: "model",
  created: model.created,
  owned_by: "parley",
  loaded: model.loaded,
  vision: model.vision,
  // An engine given whole (not read from a file) is a chat model.
  purpose: model.file?.purpose ?? "chat",
});

/** The vectors as OpenAI's embeddings API gives them: numbers, or base64 of their little-endian float32 bytes. */
export const embeddingListJson = ({ model, vectors, promptTokens }: EmbedResult, format: "float" | "base64"): OpenAiEmbeddingList => ({
  object: "list",
  data: vectors.map((vector, index) => ({ object: "embedding", index, embedding: format === "base64" ? float32Base64(vector) : Array.from(vector) })),
  model,
  usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
});

function float32Base64(vector: Float32Array): string {
  const bytes = new DataView(new ArrayBuffer(vector.length * 4));
  for (let i = 0; i < vector.length; i++) bytes.setFloat32(i * 4, vector[i]!, true);
  return Buffer.from(bytes.buffer).toString("base64");
}
