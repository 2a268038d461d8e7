/**
 * OpenAI's function calling, as request fields: the tools offered, the choice, and the calls and
 * results in the history. The engine holds calls to the functions' parameters (llm/tools.ts);
 * here a request is checked for what only it can get wrong (a result that answers no call).
 */
import { t } from "elysia";
import { InvalidInput } from "../../errors";
import type { ToolCall } from "../../llm/tools";
import type { OfferedTools } from "../offered-tools";
import { optional } from "../sampling-fields";

const TOOL_RULE =
  'each tool must be {type: "function", function: {name, description?, parameters?, strict?}}, its name of letters, digits, _ and - (at most 64)';

export const TOOLS = optional(
  t.Array(
    t.Object(
      {
        type: t.Literal("function", { error: TOOL_RULE }),
        function: t.Object(
          {
            name: t.String({ pattern: "^[a-zA-Z0-9_-]{1,64}$", error: TOOL_RULE }),
            description: optional(t.String(), "a tool's description must be a string"),
            parameters: optional(t.Record(t.String(), t.Unknown()), "a tool's parameters must be a JSON Schema object"),
            // Strict: every keyword of its parameters enforced or refused; else those the grammar cannot hold are advisory.
            strict: optional(t.Boolean(), "a tool's strict must be true or false"),
          },
          { error: TOOL_RULE },
        ),
      },
      { error: TOOL_RULE },
    ),
    { maxItems: 128 },
  ),
  `tools must be an array of up to 128; ${TOOL_RULE}`,
);

const TOOL_CHOICE_RULE = 'tool_choice must be "none", "auto", "required" or {type: "function", function: {name}}';

export const TOOL_CHOICE = optional(
  t.Union([t.Literal("none"), t.Literal("auto"), t.Literal("required"), t.Object({ type: t.Literal("function"), function: t.Object({ name: t.String() }) })], {
    error: TOOL_CHOICE_RULE,
  }),
  TOOL_CHOICE_RULE,
);

/** An assistant message's calls, as the API returned them. */
export const MESSAGE_TOOL_CALLS = optional(
  t.Array(t.Object({ id: t.String({ minLength: 1 }), type: t.Literal("function"), function: t.Object({ name: t.String(), arguments: t.String() }) })),
  'tool_calls must be an array of {id, type: "function", function: {name, arguments}}',
);

/** Chat completions' tool fields as offered tools. */
export function chatTools(body: {
  tools?: { function: { name: string; description?: string | null; parameters?: Record<string, unknown> | null; strict?: boolean | null } }[] | null;
  tool_choice?: "none" | "auto" | "required" | { function: { name: string } } | null;
  parallel_tool_calls?: boolean | null;
}): OfferedTools {
  const choice = body.tool_choice ?? undefined;
  return {
    // Chat completions' functions are strict only when they say so.
    functions: (body.tools ?? []).map(({ function: fn }) => ({ ...fn, strict: fn.strict === true })),
    choice: typeof choice === "object" ? { name: choice.function.name } : choice,
    parallel: body.parallel_tool_calls,
  };
}

/** An assistant message's calls, each one's arguments a JSON object as the API returned them. */
export function callsOf(calls: readonly { id: string; function: { name: string; arguments: string } }[], at: string): ToolCall[] {
  return calls.map(({ id, function: fn }, j) => ({
    id,
    name: fn.name,
    arguments: checkedArguments(fn.arguments, `${at}.tool_calls[${j}].function.arguments`),
  }));
}

/** A call's arguments as given, once they are seen to be a JSON object (`InvalidInput` naming `param` if not). */
export function checkedArguments(text: string, param: string): string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    throw new InvalidInput(param, "a call's arguments must be a JSON object, as text");
  return text;
}
