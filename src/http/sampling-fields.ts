/**
 * The sampling fields both APIs take beside their own temperature and seed (OpenAI's, and
 * llama-server's `top_k`, `min_p`, `repeat_penalty`), each honoured: see `samplingOf`.
 */
import { type IntegerOptions, Type } from "@sinclair/typebox";
import { type TSchema, t } from "elysia";
import { InvalidInput } from "../errors";
import type { SamplingRequest } from "../llm/engine";

/** OpenAI lets a client send null for any optional field it does not set; so may the native API's. */
export const optional = <T extends TSchema>(schema: T, error: string) => t.Optional(t.Union([schema, t.Null()], { error }));

/**
 * A field Parley cannot honour (yet): only absent or null passes, and the error says why. It would
 * change the reply, so ignoring it would answer a question the client did not ask.
 */
export const unsupported = (error: string) => optional(t.Never(), error);

/**
 * A JSON integer, and only that, for a request body: Elysia's `t.Integer` also takes a string of
 * digits (it is made for query strings, which keep it), and a body's JSON types are strict.
 */
export const integer = (options?: IntegerOptions) => Type.Integer(options);

export const UNKNOWN_FIELD_RULE = "unknown field (param names it): Parley refuses a field it does not know rather than ignore it";

/** An object's options refusing a field it does not define: it may be another server's choice that the reply would not honour. */
export const UNKNOWN_FIELD = { additionalProperties: t.Never({ error: UNKNOWN_FIELD_RULE }) };

export const SAMPLING_FIELDS = {
  top_p: optional(t.Number({ exclusiveMinimum: 0, maximum: 1 }), "top_p must be a number above 0, at most 1"),
  top_k: optional(integer({ minimum: 0 }), "top_k must be a non-negative integer (0: every token)"),
  min_p: optional(t.Number({ minimum: 0, maximum: 1 }), "min_p must be a number from 0 to 1"),
  presence_penalty: optional(t.Number({ minimum: -2, maximum: 2 }), "presence_penalty must be a number from -2 to 2"),
  frequency_penalty: optional(t.Number({ minimum: -2, maximum: 2 }), "frequency_penalty must be a number from -2 to 2"),
  repeat_penalty: optional(t.Number({ exclusiveMinimum: 0, maximum: 10 }), "repeat_penalty must be a number above 0, at most 10 (1: none)"),
  logit_bias: optional(t.Record(t.String(), t.Number({ minimum: -100, maximum: 100 })), "logit_bias must map token ids to numbers from -100 to 100"),
};

const samplingFields = t.Object(SAMPLING_FIELDS);

/** The fields as the engine takes them; `null` is as absent. */
export function samplingFieldsOf(body: typeof samplingFields.static): Omit<SamplingRequest, "temperature" | "seed"> {
  const logitBias = logitBiasOf(body.logit_bias);
  return {
    topP: body.top_p ?? undefined,
    topK: body.top_k ?? undefined,
    minP: body.min_p ?? undefined,
    presencePenalty: body.presence_penalty ?? undefined,
    frequencyPenalty: body.frequency_penalty ?? undefined,
    repeatPenalty: body.repeat_penalty ?? undefined,
    ...(logitBias ? { logitBias } : {}),
  };
}

/** OpenAI's logit_bias names tokens by their id, as a string. */
function logitBiasOf(bias: Record<string, number> | null | undefined): Record<number, number> | undefined {
  if (!bias) return undefined;
  const notAnId = Object.keys(bias).find((key) => !/^(0|[1-9][0-9]{0,9})$/.test(key));
  if (notAnId !== undefined) throw new InvalidInput("logit_bias", `logit_bias keys must be token ids (non-negative integers), not ${JSON.stringify(notAnId)}`);
  return Object.fromEntries(Object.entries(bias).map(([key, value]) => [Number(key), value]));
}
