/**
 * Tools a reply may call: the functions a request offers, whether a call is up to the model, and
 * the one JSON Schema every call must satisfy. How a model writes a call is its chat format's
 * business (tool-syntax.ts).
 */
import type { GbnfJsonSchema } from "node-llama-cpp";
import { InvalidInput } from "../errors";
import { grammarSchemaOf, schemaBudget } from "./json-schema";

export interface ToolFunction {
  name: string;
  description?: string;
  /** A JSON Schema of the call's arguments (an object): json-schema.ts says which are enforced. */
  parameters: Readonly<Record<string, unknown>>;
  /** Every keyword of `parameters` enforced, or the request refused; else those the grammar cannot hold are advisory. */
  strict?: boolean;
}

/** Up to the model (`auto`), at least one call of any (`required`), or a call of the one named. */
export type ToolChoice = "auto" | "required" | { name: string };

export interface ToolRequest {
  functions: readonly ToolFunction[];
  choice: ToolChoice;
  /** Several calls in one reply; otherwise one at most. */
  parallel: boolean;
}

/** A call as a reply made it: `arguments` is JSON text, an object valid against the function's parameters. */
export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
}

/** OpenAI's default for a function without parameters: an empty argument list. */
export const NO_PARAMETERS = { type: "object", properties: {} } as const;

/** The functions a call may be of under the request's choice. */
export function callableFunctions(tools: ToolRequest): readonly ToolFunction[] {
  const { choice } = tools;
  if (typeof choice !== "object") return tools.functions;
  const named = tools.functions.filter((fn) => fn.name === choice.name);
  if (named.length === 0) throw new InvalidInput({ part: "toolChoice" }, `it names ${JSON.stringify(choice.name)}, which is not one of the tools`);
  return named;
}

/**
 * The schema of one call of any of `functions`: `{"name": <its name>, <argumentsKey>: <its
 * arguments>}`, the name first (a model names the function before it writes the arguments). Each
 * function's parameters are checked as a reply format's schemas are, their `$defs` moved to the
 * root under names of their own. `InvalidInput` names the tool's parameters.
 */
export function callSchema(functions: readonly ToolFunction[], all: readonly ToolFunction[], argumentsKey: string): GbnfJsonSchema {
  const $defs: Record<string, unknown> = {};
  const budget = schemaBudget();
  const calls = functions.map((fn) => {
    const index = all.indexOf(fn);
    const field = { part: "tool", index, detail: "parameters" } as const;
    const checked = grammarSchemaOf(fn.parameters, field, { strict: fn.strict === true, budget }) as Record<string, unknown>;
    if (checked.type !== "object") throw new InvalidInput(field, `the schema must be of type "object" (a function's arguments are an object)`);
    const { $defs: own, ...parameters } = renamedRefs(checked, `f${index}-`) as Record<string, unknown>;
    if (own) Object.assign($defs, own);
    return {
      type: "object",
      properties: { name: { const: fn.name }, [argumentsKey]: parameters },
      required: ["name", argumentsKey],
      additionalProperties: false,
    };
  });
  const call = calls.length === 1 ? calls[0]! : { oneOf: calls };
  return { ...call, ...(Object.keys($defs).length > 0 ? { $defs } : {}) } as GbnfJsonSchema;
}

/** `schema` with its `$defs` names (and the `$ref`s to them) prefixed. */
function renamedRefs(schema: unknown, prefix: string): unknown {
  if (Array.isArray(schema)) return schema.map((item) => renamedRefs(item, prefix));
  if (typeof schema !== "object" || schema === null) return schema;
  return Object.fromEntries(
    Object.entries(schema).map(([key, value]) => {
      if (key === "$ref" && typeof value === "string") return [key, value.replace("#/$defs/", `#/$defs/${prefix}`)];
      if (key === "$defs" && typeof value === "object" && value !== null) {
        return [key, Object.fromEntries(Object.entries(value).map(([name, def]) => [`${prefix}${name}`, renamedRefs(def, prefix)]))];
      }
      return [key, renamedRefs(value, prefix)];
    }),
  );
}
