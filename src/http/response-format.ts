/**
 * `response_format`, as OpenAI's chat completions define it, on both APIs: the reply as text, one
 * JSON object, or JSON valid against a schema (the engine refuses a schema it cannot enforce).
 */
import { t } from "elysia";
import type { ReplyFormat } from "../llm/engine";

export const RESPONSE_FORMAT_RULE =
  'response_format must be {type: "text"}, {type: "json_object"} or {type: "json_schema", json_schema: {name, schema, strict}}';

export const RESPONSE_FORMAT = t.Union([
  t.Object({ type: t.Literal("text") }),
  t.Object({ type: t.Literal("json_object") }),
  t.Object({
    type: t.Literal("json_schema"),
    json_schema: t.Object({
      name: t.String({ pattern: "^[a-zA-Z0-9_-]{1,64}$" }),
      description: t.Optional(t.String()),
      schema: t.Optional(t.Record(t.String(), t.Unknown())),
      // Strict: every keyword enforced or the request refused; else those the grammar cannot hold are advisory.
      strict: t.Optional(t.Union([t.Boolean(), t.Null()])),
    }),
  }),
]);

/** The engine's format: a json_schema without a schema allows any JSON object, as OpenAI's does. */
export function formatOf(format: typeof RESPONSE_FORMAT.static | null | undefined): ReplyFormat | undefined {
  if (!format || format.type === "text") return undefined;
  if (format.type === "json_object" || format.json_schema.schema === undefined) return { type: "json_object" };
  return { type: "json_schema", schema: format.json_schema.schema, strict: format.json_schema.strict === true };
}
