/**
 * Ollama's API as its clients send it (the `ollama` package's types, docs/api.md of ollama/ollama):
 * what Parley honours, and what Ollama's own server would ignore, ignored as it does and said
 * (`ollama/ignored.ts`). A known field of the wrong type is refused by its name, as Ollama does.
 */
import { type TSchema, t } from "elysia";
import { integer, optional, unsupported } from "../sampling-fields";

/** What Ollama's server takes beside the fields it knows: anything, ignored (said by `ollama/ignored.ts`). */
const LENIENT = { additionalProperties: t.Unknown() };

/** An option Parley accepts for its type and ignores: Ollama's server would reject another type. */
const ignored = <T extends TSchema>(schema: T, rule: string) => optional(schema, rule);

/**
 * The model options Ollama knows (api/types.go's `Options` and `Runner`, past and present): those
 * that change a reply and Parley honours, then those it accepts and ignores (the rest of Ollama's
 * samplers, and the ones that only place a model in memory, which are the operator's).
 */
export const OllamaOptions = t.Object(
  {
    num_ctx: optional(integer({ minimum: 1 }), "options.num_ctx must be a positive integer (the request's context, at most the served one)"),
    temperature: optional(t.Number({ minimum: 0, maximum: 2 }), "options.temperature must be a number from 0 to 2"),
    top_p: optional(t.Number({ exclusiveMinimum: 0, maximum: 1 }), "options.top_p must be a number above 0, at most 1"),
    top_k: optional(integer({ minimum: 0 }), "options.top_k must be a non-negative integer (0: every token)"),
    min_p: optional(t.Number({ minimum: 0, maximum: 1 }), "options.min_p must be a number from 0 to 1"),
    seed: optional(integer({ minimum: 0, maximum: 2 ** 32 - 1 }), "options.seed must be an integer from 0 to 4294967295"),
    stop: optional(t.Array(t.String({ minLength: 1 }), { maxItems: 16 }), "options.stop must be at most 16 non-empty strings"),
    num_predict: optional(integer({ minimum: -2 }), "options.num_predict must be an integer (-1: as long as the context allows)"),
    repeat_penalty: optional(t.Number({ exclusiveMinimum: 0, maximum: 10 }), "options.repeat_penalty must be a number above 0, at most 10 (1: none)"),
    repeat_last_n: optional(integer({ minimum: -1 }), "options.repeat_last_n must be an integer (0: no penalties, -1: the whole reply)"),
    presence_penalty: optional(t.Number({ minimum: -2, maximum: 2 }), "options.presence_penalty must be a number from -2 to 2"),
    frequency_penalty: optional(t.Number({ minimum: -2, maximum: 2 }), "options.frequency_penalty must be a number from -2 to 2"),
    num_keep: ignored(t.Number(), "options.num_keep must be a number"),
    typical_p: ignored(t.Number(), "options.typical_p must be a number"),
    tfs_z: ignored(t.Number(), "options.tfs_z must be a number"),
    mirostat: ignored(t.Number(), "options.mirostat must be a number"),
    mirostat_tau: ignored(t.Number(), "options.mirostat_tau must be a number"),
    mirostat_eta: ignored(t.Number(), "options.mirostat_eta must be a number"),
    penalize_newline: ignored(t.Boolean(), "options.penalize_newline must be true or false"),
    num_batch: ignored(t.Number(), "options.num_batch must be a number"),
    num_gpu: ignored(t.Number(), "options.num_gpu must be a number"),
    main_gpu: ignored(t.Number(), "options.main_gpu must be a number"),
    num_thread: ignored(t.Number(), "options.num_thread must be a number"),
    low_vram: ignored(t.Boolean(), "options.low_vram must be true or false"),
    f16_kv: ignored(t.Boolean(), "options.f16_kv must be true or false"),
    logits_all: ignored(t.Boolean(), "options.logits_all must be true or false"),
    vocab_only: ignored(t.Boolean(), "options.vocab_only must be true or false"),
    use_mmap: ignored(t.Boolean(), "options.use_mmap must be true or false"),
    use_mlock: ignored(t.Boolean(), "options.use_mlock must be true or false"),
    numa: ignored(t.Boolean(), "options.numa must be true or false"),
  },
  LENIENT,
);
export type OllamaOptions = typeof OllamaOptions.static;

/** The options a reply honours; Ollama's others are accepted and ignored, and said. */
export const HONOURED_OPTIONS: ReadonlySet<string> = new Set([
  "num_ctx",
  "temperature",
  "top_p",
  "top_k",
  "min_p",
  "seed",
  "stop",
  "num_predict",
  "repeat_penalty",
  "repeat_last_n",
  "presence_penalty",
  "frequency_penalty",
]);

const ToolCall = t.Object({ function: t.Object({ name: t.String(), arguments: t.Record(t.String(), t.Unknown()) }) });

const MESSAGE_RULE = "each message needs a role (system, user, assistant or tool) and its content as a string";

export const OllamaMessage = t.Object(
  {
    role: t.Union([t.Literal("system"), t.Literal("user"), t.Literal("assistant"), t.Literal("tool")], { error: MESSAGE_RULE }),
    content: t.String({ error: MESSAGE_RULE }),
    thinking: t.Optional(t.String()),
    // A user's pictures, each its file in base64: after its text (Ollama's own server puts them before).
    images: t.Optional(t.Array(t.String(), { error: "images must be an array of pictures, each its file (PNG, JPEG, GIF or BMP) in base64" })),
    tool_calls: t.Optional(t.Array(ToolCall)),
    tool_name: t.Optional(t.String()),
  },
  LENIENT,
);

export const OllamaTool = t.Object({
  type: t.Literal("function", { error: 'each tool is {type: "function", function: {name, description, parameters}}' }),
  function: t.Object({
    name: t.String({ pattern: "^[a-zA-Z0-9_-]{1,64}$", error: "a tool's name is 1 to 64 letters, digits, _ or -" }),
    description: t.Optional(t.String()),
    parameters: t.Optional(t.Record(t.String(), t.Unknown())),
  }),
});

const MODEL = t.String({ minLength: 1, error: "model must name a model: GET /api/tags lists them" });
// How long the model stays loaded once idle after the request, within the operator's
// PARLEY_KEEP_ALIVE_S (routes/ollama.ts reads it).
const KEEP_ALIVE = t.Optional(t.Union([t.String(), t.Number()], { error: 'keep_alive must be a duration ("5m") or a number of seconds' }));

/** What both generating routes take beside their input. */
const TURN_FIELDS = {
  model: MODEL,
  stream: optional(t.Boolean(), "stream must be true (the default: one JSON object a line) or false"),
  format: t.Optional(t.Union([t.Literal("json"), t.Record(t.String(), t.Unknown())], { error: 'format must be "json" or a JSON schema' })),
  options: t.Optional(OllamaOptions),
  think: t.Optional(t.Boolean({ error: "think must be true or false (levels are for models that take them; Parley's think as long as they need)" })),
  keep_alive: KEEP_ALIVE,
  logprobs: unsupported("logprobs: Parley's log-probabilities are on POST /v1/chat/completions"),
  top_logprobs: unsupported("top_logprobs: Parley's log-probabilities are on POST /v1/chat/completions"),
};

export const OllamaChatRequest = t.Object(
  // No messages: the model is loaded (or with keep_alive 0 unloaded), as Ollama's clients ask.
  { ...TURN_FIELDS, messages: t.Array(OllamaMessage, { error: "messages must be an array" }), tools: t.Optional(t.Array(OllamaTool)) },
  LENIENT,
);
export type OllamaChatRequest = typeof OllamaChatRequest.static;

export const OllamaGenerateRequest = t.Object(
  {
    ...TURN_FIELDS,
    prompt: t.String({ error: "prompt must be a string" }),
    system: t.Optional(t.String()),
    images: t.Optional(t.Array(t.String(), { error: "images must be an array of pictures, each its file (PNG, JPEG, GIF or BMP) in base64" })),
    raw: t.Optional(t.Boolean({ error: "raw must be true (the prompt as written, no chat template) or false" })),
    suffix: t.Optional(t.String({ error: "suffix must be a string: the text the reply goes before" })),
    template: unsupported("template: the model's own chat template writes the prompt"),
    context: unsupported("context: Parley keeps no token context between requests here; send the history to /api/chat"),
  },
  LENIENT,
);
export type OllamaGenerateRequest = typeof OllamaGenerateRequest.static;

export const OllamaShowRequest = t.Object(
  {
    model: t.String({ minLength: 1 }),
    // Verbose adds the tokenizer's and the tensors' metadata, which Parley does not show.
    verbose: t.Optional(t.Literal(false, { error: "verbose: Parley shows a model's architecture and parameter count only" })),
  },
  LENIENT,
);

/** `/api/embed`: a vector an input, normalized; an input past the model's context cut to it unless `truncate: false`. */
export const OllamaEmbedRequest = t.Object(
  {
    model: MODEL,
    input: t.Union([t.String(), t.Array(t.String(), { maxItems: 2048 })], { error: "input must be a string or an array of up to 2048 strings" }),
    truncate: optional(t.Boolean(), "truncate must be true (the default: an input past the context is cut to it) or false"),
    dimensions: optional(integer({ minimum: 1 }), "dimensions must be a positive integer"),
    // No option changes a vector: each is ignored, and said.
    options: t.Optional(OllamaOptions),
    keep_alive: KEEP_ALIVE,
  },
  LENIENT,
);
export type OllamaEmbedRequest = typeof OllamaEmbedRequest.static;

/** `/api/embeddings`, Ollama's older route: one prompt, its vector as the model pools it (not normalized). */
export const OllamaEmbeddingsRequest = t.Object(
  { model: MODEL, prompt: t.String({ error: "prompt must be a string" }), options: t.Optional(OllamaOptions), keep_alive: KEEP_ALIVE },
  LENIENT,
);
export type OllamaEmbeddingsRequest = typeof OllamaEmbeddingsRequest.static;

export const OllamaEmbedResponse = t.Object({
  model: t.String(),
  embeddings: t.Array(t.Array(t.Number())),
  total_duration: integer({ minimum: 0 }),
  load_duration: integer({ minimum: 0 }),
  prompt_eval_count: integer({ minimum: 0 }),
});
export type OllamaEmbedResponse = typeof OllamaEmbedResponse.static;

export const OllamaEmbeddingsResponse = t.Object({ embedding: t.Array(t.Number()) });

/** What every reply object carries; the last (`done: true`) also the counts and durations (ns). */
const REPLY_FIELDS = {
  model: t.String(),
  created_at: t.String({ format: "date-time" }),
  done: t.Boolean(),
  done_reason: t.Optional(t.Union([t.Literal("stop"), t.Literal("length"), t.Literal("load"), t.Literal("unload")])),
  total_duration: t.Optional(integer({ minimum: 0 })),
  load_duration: t.Optional(integer({ minimum: 0 })),
  prompt_eval_count: t.Optional(integer({ minimum: 0 })),
  prompt_eval_duration: t.Optional(integer({ minimum: 0 })),
  eval_count: t.Optional(integer({ minimum: 0 })),
  eval_duration: t.Optional(integer({ minimum: 0 })),
};

/** `/api/chat`'s reply, or one line of its stream. */
export const OllamaChatResponse = t.Object({
  ...REPLY_FIELDS,
  message: t.Object({
    role: t.Literal("assistant"),
    content: t.String(),
    thinking: t.Optional(t.String()),
    tool_calls: t.Optional(t.Array(ToolCall)),
  }),
});
export type OllamaChatResponse = typeof OllamaChatResponse.static;

/** `/api/generate`'s reply, or one line of its stream. */
export const OllamaGenerateResponse = t.Object({ ...REPLY_FIELDS, response: t.String(), thinking: t.Optional(t.String()) });
export type OllamaGenerateResponse = typeof OllamaGenerateResponse.static;

const OllamaModelDetails = t.Object({
  parent_model: t.String(),
  format: t.String(),
  family: t.String(),
  families: t.Array(t.String()),
  parameter_size: t.String(),
  quantization_level: t.String(),
});

export const OllamaModel = t.Object({
  name: t.String(),
  model: t.String(),
  modified_at: t.String({ format: "date-time" }),
  size: integer({ minimum: 0 }),
  digest: t.String(),
  details: OllamaModelDetails,
  expires_at: t.Optional(t.String({ format: "date-time" })),
  size_vram: t.Optional(integer({ minimum: 0 })),
});
export type OllamaModel = typeof OllamaModel.static;

export const OllamaModelList = t.Object({ models: t.Array(OllamaModel) });

export const OllamaShowResponse = t.Object({
  license: t.String(),
  modelfile: t.String(),
  parameters: t.String(),
  template: t.String(),
  system: t.String(),
  details: OllamaModelDetails,
  model_info: t.Record(t.String(), t.Unknown()),
  capabilities: t.Array(t.String()),
  modified_at: t.String({ format: "date-time" }),
});
export type OllamaShowResponse = typeof OllamaShowResponse.static;

export const OllamaVersion = t.Object({ version: t.String() });

/** Ollama's error body: one message, leading with the field at fault. */
export const OllamaErrorBody = t.Object({ error: t.String() });
