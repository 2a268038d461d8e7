/**
 * Ollama's server decodes a body leniently: a field it does not know, at the top, in a message or
 * among the `options`, is ignored (an option with a warning in its log), and its clients rely on
 * that. Parley ignores the same, and says so where a client and an operator can see it: a `warn`
 * log line naming the fields, `parley_ignored_fields_total`, and the response's `X-Parley-Ignored-Fields`.
 * A value held to a bound (a context larger than the served one) is said the same way, in
 * `X-Parley-Clamped-Fields`.
 */
import type { TObject } from "@sinclair/typebox";
import type { Logger } from "../../log";
import type { Metrics } from "../../metrics";
import { contextOf } from "../request-context";
import type { PlainExchange } from "../turn-driver";
import { OllamaMessage, OllamaOptions } from "./contract";

const IGNORED_HEADER = "x-parley-ignored-fields";
const CLAMPED_HEADER = "x-parley-clamped-fields";

/**
 * The names a counter's label may take, beside `other`: Ollama's own options (at either level: some
 * clients put them at the top), and the fields of Ollama's requests that a route here has not.
 */
const KNOWN_NAMES: ReadonlySet<string> = new Set([
  ...Object.keys(OllamaOptions.properties),
  "options",
  "tool_choice",
  "system",
  "suffix",
  "template",
  "name",
  "shift",
  "truncate",
]);

const labelOf = (name: string): string => {
  if (name.startsWith("messages[")) return "messages.other";
  const option = name.startsWith("options.") ? name.slice("options.".length) : undefined;
  if (option !== undefined) return Object.hasOwn(OllamaOptions.properties, option) ? name : "options.other";
  return KNOWN_NAMES.has(name) ? name : "other";
};

/**
 * The fields of `body` that `schema` does not define, then, where it defines `options`, those
 * options that `honoured` does not name (as `options.<name>`), then its messages' own (as
 * `messages[i].<name>`), in the body's order.
 */
export function ignoredFields(body: object, schema: TObject, honoured: ReadonlySet<string>): string[] {
  const top = Object.keys(body).filter((name) => !Object.hasOwn(schema.properties, name));
  const { options, messages } = body as { options?: object | null; messages?: unknown };
  const inOptions = options && Object.hasOwn(schema.properties, "options") ? Object.keys(options).filter((name) => !honoured.has(name)) : [];
  const inMessages = Array.isArray(messages) && Object.hasOwn(schema.properties, "messages") ? messageFields(messages as object[]) : [];
  return [...top, ...inOptions.map((name) => `options.${name}`), ...inMessages];
}

/** The fields of each message that a message does not define, as `messages[i].<name>`. */
const messageFields = (messages: readonly object[]): string[] =>
  messages.flatMap((message, i) => Object.keys(message).flatMap((name) => (Object.hasOwn(OllamaMessage.properties, name) ? [] : [`messages[${i}].${name}`])));

/** At most this many names are listed: a body may carry any number of fields. */
const LISTED = 32;

/** A name as a header may carry it: a key of a JSON body may hold any character. */
const spelled = (name: string): string => (/^[A-Za-z0-9_.[\]-]{1,80}$/.test(name) ? name : encodeURIComponent(name.slice(0, 64)));

/** The names, each as a header may carry it, and how many more there were. */
const listed = (fields: readonly string[]): string[] => [
  ...fields.slice(0, LISTED).map(spelled),
  ...(fields.length > LISTED ? [`(${fields.length - LISTED} more)`] : []),
];

export class Leniency {
  constructor(private readonly deps: { log: Logger; metrics: Metrics }) {}

  /** Says the fields ignored, if any. */
  ignored({ request, set }: PlainExchange, fields: readonly string[]): void {
    if (fields.length === 0) return;
    const names = listed(fields);
    set.headers[IGNORED_HEADER] = names.join(", ");
    // Counted per label: a body may carry many fields, and the labels are few.
    const counts = new Map<string, number>();
    for (const field of fields) counts.set(labelOf(field), (counts.get(labelOf(field)) ?? 0) + 1);
    for (const [field, count] of counts) this.deps.metrics.ignoredFields.inc({ protocol: "ollama", field }, count);
    const { id, path } = contextOf(request);
    this.deps.log.warn({ request_id: id, path, fields: names }, "fields ignored, as Ollama's server ignores them");
  }

  /** Says that `field` asked for more than is served, and was held to `value`. */
  clamped({ request, set }: PlainExchange, field: string, asked: number, value: number): void {
    set.headers[CLAMPED_HEADER] = `${field}=${value}`;
    const { id, path } = contextOf(request);
    this.deps.log.warn({ request_id: id, path, field, asked, value }, "a field held to what is served");
  }
}
