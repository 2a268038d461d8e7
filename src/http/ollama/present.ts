/** Replies and models as Ollama's API shows them (the `ollama` package's ChatResponse, GenerateResponse, ListResponse…). */
import type { CompletionResult, CompletionStart } from "../../chat/completions";
import type { EmbedResult } from "../../chat/retrieval";
import type { ModelInfo } from "../../chat/turn-runner";
import type { ModelPurpose } from "../../gguf/describe";
import type { ToolCall } from "../../llm/engine";
import { ollamaErrorBody } from "../errors";
import { jsonLine, type SseChunk } from "../sse";
import type { Framing } from "../turn-driver";
import type { OllamaChatResponse, OllamaEmbedResponse, OllamaGenerateResponse, OllamaModel, OllamaShowResponse } from "./contract";

/** Which of the two generating routes a reply answers: `/api/chat` writes a message, `/api/generate` a response text. */
export type OllamaRoute = "chat" | "generate";

const NS_PER_MS = 1_000_000;

/** Ollama's reasons: a reply cut by `num_predict` (or the context, or the generation cap) is `length`. */
const doneReasonOf = (result: CompletionResult): "stop" | "length" => (result.finishReason === "stop" ? "stop" : "length");

const toolCallJson = (call: ToolCall) => ({ function: { name: call.name, arguments: JSON.parse(call.arguments) as Record<string, unknown> } });

/** The times and counts a finished reply carries; durations in nanoseconds, as Ollama gives them. */
function doneFields(result: CompletionResult, times: { startedAt: number; promptAt: number | undefined }) {
  const endedAt = performance.now();
  const promptAt = times.promptAt ?? endedAt;
  return {
    done: true,
    done_reason: doneReasonOf(result),
    total_duration: Math.round((endedAt - times.startedAt) * NS_PER_MS),
    load_duration: 0,
    prompt_eval_count: result.usage.promptTokens,
    prompt_eval_duration: Math.round((promptAt - times.startedAt) * NS_PER_MS),
    eval_count: result.usage.completionTokens,
    eval_duration: Math.round((endedAt - promptAt) * NS_PER_MS),
  };
}

/** The text pieces of a reply (its answer, its thought, its calls) in the route's shape. */
function piece(route: OllamaRoute, content: string, extra: { thinking?: string; tool_calls?: ReturnType<typeof toolCallJson>[] } = {}) {
  if (route === "generate") return { response: content, ...(extra.thinking !== undefined ? { thinking: extra.thinking } : {}) };
  return { message: { role: "assistant" as const, content, ...extra } };
}

const header = (model: string) => ({ model, created_at: new Date().toISOString() });

/** The answer to a request of no prompt, Ollama's way to load a model (`unload` with keep_alive 0). */
export const loadedJson = (route: OllamaRoute, model: string, unloaded: boolean): OllamaChatResponse | OllamaGenerateResponse => ({
  ...header(model),
  ...piece(route, ""),
  done: true,
  done_reason: unloaded ? "unload" : "load",
});

/** @param shown whether a reasoning model's thought is given (`think` not false) */
export function replyJson(route: OllamaRoute, result: CompletionResult, shown: boolean, startedAt: number): OllamaChatResponse | OllamaGenerateResponse {
  const thinking = shown && result.reasoning !== undefined ? { thinking: result.reasoning } : {};
  const calls = route === "chat" && result.toolCalls ? { tool_calls: result.toolCalls.map(toolCallJson) } : {};
  return { ...header(result.model), ...piece(route, result.text, { ...thinking, ...calls }), ...doneFields(result, { startedAt, promptAt: undefined }) };
}

/**
 * A reply as Ollama streams it: one JSON object a line, each a piece of the reply, the last with
 * `done: true` and the counts; a call whole, once its object is complete (Ollama's clients take
 * calls whole). An error after the first line is a line with `error`, as Ollama writes it.
 */
export function ollamaFraming(route: OllamaRoute, shown: boolean): Framing<CompletionStart, CompletionResult> {
  const startedAt = performance.now();
  let promptAt: number | undefined;
  let model = "";
  const line = (content: string, extra?: Parameters<typeof piece>[2]): SseChunk[] => [
    jsonLine({ ...header(model), ...piece(route, content, extra), done: false }),
  ];
  return {
    contentType: "application/x-ndjson",
    start: (start) => {
      model = start.model;
      return [];
    },
    prompt: () => {
      promptAt = performance.now();
      return [];
    },
    delta: (content) => line(content),
    reasoning: (content) => (shown ? line("", { thinking: content }) : []),
    toolCall: (part) => (part.part === "close" && route === "chat" ? line("", { tool_calls: [toolCallJson(part.call)] }) : []),
    done: (result) => [jsonLine({ ...header(result.model), ...piece(route, ""), ...doneFields(result, { startedAt, promptAt }) })],
    error: (error) => [jsonLine(ollamaErrorBody(error))],
  };
}

/** `details` of a model: what Parley read of its file. */
const detailsOf = (model: ModelInfo) => ({
  parent_model: "",
  format: "gguf",
  family: model.file?.architecture ?? "",
  families: model.file?.architecture ? [model.file.architecture] : [],
  parameter_size: model.file ? parameterSize(model.file.parameters) : "",
  quantization_level: model.file?.quantization ?? "",
});

/** Ollama writes a model's size in parameters as 8.0B, 494.03M. */
function parameterSize(parameters: number): string {
  for (const [unit, size] of [
    ["B", 1e9],
    ["M", 1e6],
    ["K", 1e3],
  ] as const) {
    if (parameters >= size) return `${(parameters / size).toFixed(2)}${unit}`;
  }
  return String(parameters);
}

/** A model as `/api/tags` and `/api/ps` list it; a model's digest is its file's, which Parley does not hash: its id stands for it. */
export const modelJson = (model: ModelInfo): OllamaModel => ({
  name: model.id,
  model: model.id,
  modified_at: new Date(model.created * 1000).toISOString(),
  size: model.file?.sizeBytes ?? 0,
  digest: "",
  details: detailsOf(model),
});

/** Ollama's words for what a model can do; it has none for reranking. */
const CAPABILITIES: Readonly<Record<ModelPurpose, string[]>> = { chat: ["completion", "tools"], embedding: ["embedding"], ranking: [] };

/** What `/api/show` tells of a model; what Ollama's Modelfile would hold beyond its template, Parley does not have. */
export const showJson = (model: ModelInfo): OllamaShowResponse => ({
  license: "",
  modelfile: "",
  parameters: "",
  template: model.file?.chatTemplate ?? "",
  system: "",
  details: detailsOf(model),
  model_info: { "general.architecture": model.file?.architecture ?? "", "general.parameter_count": model.file?.parameters ?? 0 },
  capabilities: [...CAPABILITIES[model.file?.purpose ?? "chat"], ...(model.vision ? ["vision"] : [])],
  modified_at: new Date(model.created * 1000).toISOString(),
});

/** `/api/embed`'s answer; durations in nanoseconds, as Ollama's. Parley does not tell a load apart: it is in the total. */
export const embedJson = ({ model, vectors, promptTokens }: EmbedResult, startedAt: number): OllamaEmbedResponse => ({
  model,
  embeddings: vectors.map((vector) => Array.from(vector)),
  total_duration: Math.round((performance.now() - startedAt) * 1e6),
  load_duration: 0,
  prompt_eval_count: promptTokens,
});
