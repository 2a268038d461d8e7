/** Replies and models as Ollama's API shows them (the `ollama` package's ChatResponse, GenerateResponse, ListResponse…). */
import type { CompletionResult, CompletionStart } from "../../chat/completions";
import type { EmbedResult } from "../../chat/retrieval";
import type { ModelFile, ModelInfo, TurnEvent } from "../../chat/turn-runner";
import type { ToolCall } from "../../llm/engine";
import { ollamaErrorBody } from "../errors";
import { jsonLine, type SseChunk } from "../sse";
import type { Framing } from "../turn-driver";
import type { OllamaChatResponse, OllamaEmbedResponse, OllamaGenerateResponse, OllamaModel, OllamaShowResponse } from "./contract";
import { answerName, ollamaName } from "./names";

/** Which of the two generating routes a reply answers: `/api/chat` writes a message, `/api/generate` a response text. */
export type OllamaRoute = "chat" | "generate";

const NS_PER_MS = 1_000_000;

/** Ollama's reasons: a reply cut by `num_predict` (or the context, or the generation cap) is `length`. */
const doneReasonOf = (result: CompletionResult): "stop" | "length" => (result.finishReason === "stop" ? "stop" : "length");

const toolCallJson = (call: ToolCall) => ({ function: { name: call.name, arguments: JSON.parse(call.arguments) as Record<string, unknown> } });

const ns = (ms: number) => Math.max(0, Math.round(ms * NS_PER_MS));

/**
 * A reply's times as Ollama reports them, measured by its turn's events, streamed or not: from the
 * request's arrival (`total_duration`), the wait for the model (`load_duration`: its load, where it
 * was not loaded), the prompt's evaluation (from admission to the prompt's `prompt` event) and the
 * reply's generation (from then to its end).
 */
export class ReplyClock {
  private loadMs = 0;
  private admittedAt: number | undefined;
  private promptAt: number | undefined;

  constructor(private readonly startedAt: number) {}

  seen(event: CompletionStart | TurnEvent): void {
    if (event.type === "start") {
      this.admittedAt = performance.now();
      this.loadMs = event.loadMs ?? 0;
    } else if (event.type === "prompt") this.promptAt = performance.now();
  }

  /** The durations in nanoseconds, as Ollama gives them, the reply ending now. */
  durations() {
    const endedAt = performance.now();
    const admittedAt = this.admittedAt ?? this.startedAt;
    const promptAt = this.promptAt ?? admittedAt;
    return {
      total_duration: ns(endedAt - this.startedAt),
      load_duration: ns(this.loadMs),
      prompt_eval_duration: ns(promptAt - admittedAt),
      eval_duration: ns(endedAt - promptAt),
    };
  }
}

/** The times and counts a finished reply carries. */
function doneFields(result: CompletionResult, clock: ReplyClock) {
  const { total_duration, load_duration, prompt_eval_duration, eval_duration } = clock.durations();
  return {
    done: true,
    done_reason: doneReasonOf(result),
    total_duration,
    load_duration,
    prompt_eval_count: result.usage.promptTokens,
    prompt_eval_duration,
    eval_count: result.usage.completionTokens,
    eval_duration,
  };
}

/** The text pieces of a reply (its answer, its thought, its calls) in the route's shape. */
function piece(route: OllamaRoute, content: string, extra: { thinking?: string; tool_calls?: ReturnType<typeof toolCallJson>[] } = {}) {
  if (route === "generate") return { response: content, ...(extra.thinking !== undefined ? { thinking: extra.thinking } : {}) };
  return { message: { role: "assistant" as const, content, ...extra } };
}

const header = (model: string) => ({ model, created_at: new Date().toISOString() });

/** The answer to a request of no prompt, Ollama's way to load a model (`unload` with keep_alive 0). */
export const loadedJson = (route: OllamaRoute, asked: string, model: string, unloaded: boolean): OllamaChatResponse | OllamaGenerateResponse => ({
  ...header(answerName(asked, model)),
  ...piece(route, ""),
  done: true,
  done_reason: unloaded ? "unload" : "load",
});

/**
 * @param asked the model as the request named it, which Ollama's answers echo
 * @param shown whether a reasoning model's thought is given (`think` not false)
 */
export function replyJson(
  route: OllamaRoute,
  asked: string,
  result: CompletionResult,
  shown: boolean,
  clock: ReplyClock,
): OllamaChatResponse | OllamaGenerateResponse {
  const thinking = shown && result.reasoning !== undefined ? { thinking: result.reasoning } : {};
  const calls = route === "chat" && result.toolCalls ? { tool_calls: result.toolCalls.map(toolCallJson) } : {};
  return { ...header(answerName(asked, result.model)), ...piece(route, result.text, { ...thinking, ...calls }), ...doneFields(result, clock) };
}

/**
 * A reply as Ollama streams it: one JSON object a line, each a piece of the reply, the last with
 * `done: true` and the counts; a call whole, once its object is complete (Ollama's clients take
 * calls whole). An error after the first line is a line with `error`, as Ollama writes it.
 */
export function ollamaFraming(route: OllamaRoute, asked: string, shown: boolean, clock: ReplyClock): Framing<CompletionStart, CompletionResult> {
  let name = asked;
  const line = (content: string, extra?: Parameters<typeof piece>[2]): SseChunk[] => [
    jsonLine({ ...header(name), ...piece(route, content, extra), done: false }),
  ];
  return {
    contentType: "application/x-ndjson",
    start: (start) => {
      name = answerName(asked, start.model);
      return [];
    },
    delta: (content) => line(content),
    reasoning: (content) => (shown ? line("", { thinking: content }) : []),
    toolCall: (part) => (part.part === "close" && route === "chat" ? line("", { tool_calls: [toolCallJson(part.call)] }) : []),
    done: (result) => [jsonLine({ ...header(name), ...piece(route, ""), ...doneFields(result, clock) })],
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
  name: ollamaName(model.id),
  model: ollamaName(model.id),
  modified_at: new Date(model.created * 1000).toISOString(),
  size: model.file?.sizeBytes ?? 0,
  digest: "",
  details: detailsOf(model),
});

/** Ollama's "never" (a keep-alive below zero): its longest duration, 2^63-1 ns, from now. */
const NEVER_MS = Number(2n ** 63n / 1_000_000n);

/** A loaded model as `/api/ps` lists it: when it unloads, from its keep-alive. Parley does not tell how much of it is on a GPU. */
export const loadedModelJson = (model: ModelInfo): OllamaModel => {
  const expiresAt = model.expiresAt ?? Number.POSITIVE_INFINITY;
  return { ...modelJson(model), expires_at: new Date(Number.isFinite(expiresAt) ? expiresAt : Date.now() + NEVER_MS).toISOString(), size_vram: 0 };
};

/** Ollama's words for what a model can do (its server's `capabilities`); it has none for reranking. */
function capabilitiesOf(model: ModelInfo): string[] {
  const purpose = model.file?.purpose ?? "chat";
  if (purpose === "embedding") return ["embedding"];
  if (purpose === "ranking") return [];
  return ["completion", "tools", ...(model.vision ? ["vision"] : []), ...(model.thinks ? ["thinking"] : []), ...(model.infills ? ["insert"] : [])];
}

/**
 * `model_info`: the file's header as Ollama shows it, every key with one value as the file holds it
 * (`general.architecture`, `<arch>.context_length`, `<arch>.embedding_length`, `<arch>.block_count`…);
 * no lists (the tokenizer's: Ollama leaves them out unless verbose, and Parley does not keep them)
 * and no chat template (`template` has it). Its parameters counted where the header does not say.
 */
function modelInfoOf(file: ModelFile): Record<string, unknown> {
  const info: Record<string, unknown> = { "general.parameter_count": file.parameters };
  for (const [key, value] of Object.entries(file.metadata)) {
    if (value.type === "array" || key === "tokenizer.chat_template") continue;
    info[key] = typeof value.value === "bigint" ? Number(value.value) : value.value;
  }
  return info;
}

/** What `/api/show` tells of a model; what Ollama's Modelfile would hold beyond its template, Parley does not have. */
export const showJson = (model: ModelInfo): OllamaShowResponse => {
  const license = model.file?.metadata["general.license"];
  return {
    license: license?.type === "string" ? license.value : "",
    modelfile: "",
    parameters: "",
    template: model.file?.chatTemplate ?? "",
    system: "",
    details: detailsOf(model),
    model_info: model.file ? modelInfoOf(model.file) : {},
    capabilities: capabilitiesOf(model),
    modified_at: new Date(model.created * 1000).toISOString(),
  };
};

/** `/api/embed`'s answer; durations in nanoseconds, as Ollama's, from the request's arrival. */
export const embedJson = (asked: string, { model, vectors, promptTokens, loadMs }: EmbedResult, startedAt: number): OllamaEmbedResponse => ({
  model: answerName(asked, model),
  embeddings: vectors.map((vector) => Array.from(vector)),
  total_duration: ns(performance.now() - startedAt),
  load_duration: ns(loadMs),
  prompt_eval_count: promptTokens,
});
