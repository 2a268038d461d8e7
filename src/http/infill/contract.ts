/**
 * llama-server's `POST /infill` (tools/server/server-context.cpp, `post_infill`): code completion
 * between the text before the cursor and the text after it, as llama.vscode and llama.vim ask for it.
 * Its sampling fields are llama-server's `/completion` ones; its fields that end a completion early
 * (`n_indent`, `t_max_predict_ms`) are honoured; a field that only tunes llama-server's own slots and
 * timing is taken without effect (docs/API.md says which); any other is refused.
 */
import { t } from "elysia";
import { integer, optional, SAMPLING_FIELDS, UNKNOWN_FIELD } from "../sampling-fields";

const { logit_bias: _, ...SAMPLING } = SAMPLING_FIELDS;

/**
 * Taken, changing nothing: how llama-server schedules its slots, which Parley does its own way, and
 * `t_max_prompt_ms`, which llama-server itself does not implement.
 */
const WITHOUT_EFFECT = {
  cache_prompt: optional(t.Boolean(), "cache_prompt must be true or false"),
  id_slot: optional(integer(), "id_slot must be an integer"),
  t_max_prompt_ms: optional(t.Number(), "t_max_prompt_ms must be a number"),
};

export const InfillRequest = t.Object(
  {
    input_prefix: t.String({ error: "input_prefix must be a string: the text before the cursor" }),
    input_suffix: t.String({ error: "input_suffix must be a string: the text after the cursor" }),
    input_extra: optional(
      t.Array(t.Object({ text: t.String(), filename: optional(t.String(), "a file's filename must be a string") }, UNKNOWN_FIELD)),
      'input_extra must be an array of {"filename": string, "text": string}',
    ),
    prompt: optional(t.String(), "prompt must be a string: the middle's start, as the editor has it"),
    model: optional(t.String(), "model must be a string"),
    n_predict: optional(integer({ minimum: -1 }), "n_predict must be an integer, -1 for as long as the context allows"),
    max_tokens: optional(integer({ minimum: -1 }), "max_tokens must be an integer, -1 for as long as the context allows"),
    temperature: optional(t.Number({ minimum: 0 }), "temperature must be a non-negative number (0: greedy)"),
    ...SAMPLING,
    repeat_last_n: optional(integer({ minimum: -1 }), "repeat_last_n must be an integer, -1 for the whole context"),
    seed: optional(integer({ minimum: -1 }), "seed must be an integer (-1: random)"),
    stop: optional(t.Array(t.String({ minLength: 1 })), "stop must be an array of non-empty strings"),
    stream: optional(t.Boolean(), "stream must be true or false"),
    response_fields: optional(t.Array(t.String()), 'response_fields must be an array of paths into the response ("content", "timings/prompt_n")'),
    n_indent: optional(integer({ minimum: 0 }), "n_indent must be a non-negative integer (0: no indentation asked)"),
    t_max_predict_ms: optional(t.Number(), "t_max_predict_ms must be a number of milliseconds (0 or less: no limit)"),
    samplers: optional(t.Array(t.String()), "samplers must be an array of sampler names"),
    ...WITHOUT_EFFECT,
  },
  UNKNOWN_FIELD,
);
export type InfillRequest = typeof InfillRequest.static;

const count = integer({ minimum: 0 });

/** llama-server's `timings`: the prompt's evaluation (its tokens not cached) and the reply's. */
const Timings = t.Object({
  cache_n: count,
  prompt_n: count,
  prompt_ms: t.Number(),
  prompt_per_token_ms: t.Number(),
  prompt_per_second: t.Number(),
  predicted_n: count,
  predicted_ms: t.Number(),
  predicted_per_token_ms: t.Number(),
  predicted_per_second: t.Number(),
});

/** The completion, or its stream's last event, as llama-server's `/completion` and `/infill` give it. */
export const InfillResponse = t.Object({
  index: count,
  content: t.String(),
  tokens: t.Array(integer()),
  id_slot: integer(),
  stop: t.Literal(true),
  model: t.String(),
  tokens_predicted: count,
  tokens_evaluated: count,
  has_new_line: t.Boolean(),
  truncated: t.Boolean(),
  /** `none`: cancelled (the server closing). */
  stop_type: t.Union([t.Literal("eos"), t.Literal("word"), t.Literal("limit"), t.Literal("none")]),
  stopping_word: t.String(),
  tokens_cached: count,
  timings: Timings,
});
export type InfillResponse = typeof InfillResponse.static;

/** One event of the stream before its last: a piece of the text. */
export const InfillChunk = t.Object({
  index: count,
  content: t.String(),
  tokens: t.Array(integer()),
  stop: t.Literal(false),
  id_slot: integer(),
  tokens_predicted: count,
  tokens_evaluated: count,
});
export type InfillChunk = typeof InfillChunk.static;
