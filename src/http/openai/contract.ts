/**
 * The OpenAI-compatible API's bodies (docs/API.md, "OpenAI-compatible API"), as OpenAI's own API
 * writes them, in the same TypeBox style as Parley's contract (../contract.ts): the subset Parley
 * produces, closed so drift shows.
 */
import { type Static, Type as t } from "@sinclair/typebox";

const closed = { additionalProperties: false } as const;

export const OPENAI_FINISH_REASONS = ["stop", "length", "tool_calls"] as const;
const FinishReason = t.Union(OPENAI_FINISH_REASONS.map((reason) => t.Literal(reason)));

export const OpenAiErrorBody = t.Object(
  {
    error: t.Object(
      {
        message: t.String(),
        type: t.String({
          description: "invalid_request_error, authentication_error, permission_error, not_found_error, rate_limit_error, insufficient_quota or server_error",
        }),
        param: t.Union([t.String(), t.Null()]),
        code: t.String({ description: "Parley's error code (see Errors); insufficient_quota for a spent token quota, as OpenAI's" }),
      },
      closed,
    ),
  },
  closed,
);
export type OpenAiErrorBody = Static<typeof OpenAiErrorBody>;

export const CompletionUsage = t.Object(
  {
    prompt_tokens: t.Integer(),
    completion_tokens: t.Integer(),
    total_tokens: t.Integer(),
    prompt_tokens_details: t.Object({ cached_tokens: t.Integer({ description: "Of prompt_tokens, how many a sequence's KV cache already held" }) }, closed),
  },
  closed,
);
export type CompletionUsage = Static<typeof CompletionUsage>;

const ToolCall = t.Object(
  {
    id: t.String(),
    type: t.Literal("function"),
    function: t.Object(
      { name: t.String(), arguments: t.String({ description: "The arguments as JSON text: an object valid against the function's parameters" }) },
      closed,
    ),
  },
  closed,
);

const ToolCallDelta = t.Object(
  {
    index: t.Integer({ description: "Which call of the reply this piece belongs to" }),
    id: t.Optional(t.String()),
    type: t.Optional(t.Literal("function")),
    function: t.Object({ name: t.Optional(t.String()), arguments: t.Optional(t.String()) }, closed),
  },
  { ...closed, description: "A call's id, type and name come first (arguments empty), then its arguments" },
);

const SpelledToken = {
  token: t.String({ description: "The token's text (U+FFFD for a piece of a character)" }),
  logprob: t.Number({ description: "Its log-probability under the model's own distribution, before any sampler" }),
  bytes: t.Array(t.Integer({ minimum: 0, maximum: 255 }), { description: "The token's bytes" }),
};

const Logprobs = t.Union(
  [
    t.Null(),
    t.Object(
      {
        content: t.Union([t.Array(t.Object({ ...SpelledToken, top_logprobs: t.Array(t.Object(SpelledToken, closed), { maxItems: 20 }) }, closed)), t.Null()]),
        refusal: t.Null(),
      },
      closed,
    ),
  ],
  { description: "With logprobs: true, the answer's tokens and the top_logprobs most likely at each place; null otherwise" },
);

export const ChatCompletion = t.Object(
  {
    id: t.String(),
    object: t.Literal("chat.completion"),
    created: t.Integer({ description: "Unix seconds" }),
    model: t.String({ description: "The loaded model, whatever the request named" }),
    choices: t.Array(
      t.Object(
        {
          index: t.Literal(0),
          message: t.Object(
            {
              role: t.Literal("assistant"),
              content: t.Union([t.String(), t.Null()], { description: "Null when the reply only calls tools" }),
              refusal: t.Null({ description: "Always null: Parley's models have no refusal channel apart from their text" }),
              tool_calls: t.Optional(t.Array(ToolCall, { minItems: 1, description: "The tools the reply calls, after its content" })),
              reasoning_content: t.Optional(
                t.String({ description: "A reasoning model's thought, as llama-server and DeepSeek return it; never part of content" }),
              ),
            },
            closed,
          ),
          logprobs: Logprobs,
          finish_reason: FinishReason,
        },
        closed,
      ),
      { minItems: 1, maxItems: 1 },
    ),
    usage: CompletionUsage,
  },
  closed,
);
export type ChatCompletion = Static<typeof ChatCompletion>;

export const ChatCompletionChunk = t.Object(
  {
    id: t.String(),
    object: t.Literal("chat.completion.chunk"),
    created: t.Integer(),
    model: t.String(),
    choices: t.Array(
      t.Object(
        {
          index: t.Literal(0),
          delta: t.Object(
            {
              role: t.Optional(t.Literal("assistant")),
              content: t.Optional(t.String()),
              reasoning_content: t.Optional(t.String({ description: "The next piece of a reasoning model's thought, before any content" })),
              tool_calls: t.Optional(t.Array(ToolCallDelta, { minItems: 1, maxItems: 1 })),
            },
            closed,
          ),
          logprobs: Logprobs,
          finish_reason: t.Union([FinishReason, t.Null()]),
        },
        closed,
      ),
      { maxItems: 1, description: "Empty in the usage chunk" },
    ),
    usage: t.Optional(t.Union([CompletionUsage, t.Null()], { description: "With stream_options.include_usage: null, then the totals in the last chunk" })),
  },
  closed,
);
export type ChatCompletionChunk = Static<typeof ChatCompletionChunk>;

/** What a listed model answers; the engine's own word for it is ModelPurpose (src/gguf/describe.ts). */
const MODEL_PURPOSES = ["chat", "embedding", "ranking"] as const;

export const OpenAiModel = t.Object(
  {
    id: t.String(),
    object: t.Literal("model"),
    created: t.Integer({ description: "Unix seconds: when the model's file last changed" }),
    owned_by: t.Literal("parley"),
    loaded: t.Boolean({ description: "Parley's own: whether the model is in memory now (else the next request for it loads it)" }),
    vision: t.Boolean({ description: "Parley's own: whether the model sees pictures in messages (it has a projector)" }),
    purpose: t.Union(
      MODEL_PURPOSES.map((purpose) => t.Literal(purpose)),
      { description: "Parley's own: what the model answers: chat (replies), embedding (/v1/embeddings) or ranking (/v1/rerank)" },
    ),
  },
  closed,
);
export type OpenAiModel = Static<typeof OpenAiModel>;

export const OpenAiModelList = t.Object({ object: t.Literal("list"), data: t.Array(OpenAiModel) }, closed);
export type OpenAiModelList = Static<typeof OpenAiModelList>;

/** `/v1/embeddings`' answer: each input's vector, as numbers or as base64 of its little-endian float32 bytes. */
export const OpenAiEmbeddingList = t.Object(
  {
    object: t.Literal("list"),
    data: t.Array(
      t.Object(
        {
          object: t.Literal("embedding"),
          index: t.Integer({ minimum: 0 }),
          embedding: t.Union([t.Array(t.Number()), t.String({ description: "base64 of the vector's little-endian float32 values" })]),
        },
        closed,
      ),
    ),
    model: t.String(),
    usage: t.Object({ prompt_tokens: t.Integer({ minimum: 0 }), total_tokens: t.Integer({ minimum: 0 }) }, closed),
  },
  closed,
);
export type OpenAiEmbeddingList = Static<typeof OpenAiEmbeddingList>;

/** A legacy completion's log-probabilities: each token's text, its own, the most likely tokens' by text, and where it starts in the choice's text. */
const TextLogprobs = t.Object(
  {
    tokens: t.Array(t.String()),
    token_logprobs: t.Array(t.Number()),
    top_logprobs: t.Array(t.Record(t.String(), t.Number())),
    text_offset: t.Array(t.Integer({ minimum: 0 })),
  },
  closed,
);
export type TextLogprobs = Static<typeof TextLogprobs>;

const TextChoice = t.Object(
  {
    text: t.String(),
    index: t.Integer({ minimum: 0 }),
    logprobs: t.Union([TextLogprobs, t.Null()]),
    finish_reason: t.Union([t.Literal("stop"), t.Literal("length"), t.Null()]),
  },
  closed,
);

/** `/v1/completions`' answer, or (`object: "text_completion"` too, as OpenAI's) one chunk of its stream. */
export const TextCompletion = t.Object(
  {
    id: t.String(),
    object: t.Literal("text_completion"),
    created: t.Integer(),
    model: t.String(),
    choices: t.Array(TextChoice),
    usage: t.Optional(t.Union([CompletionUsage, t.Null()])),
  },
  closed,
);
export type TextCompletion = Static<typeof TextCompletion>;
