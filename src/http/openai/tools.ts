/**
 * OpenAI's function calling, as request fields: the tools offered, the choice, and the calls and
 * results in the history. The engine holds calls to the functions' parameters (llm/tools.ts);
 * here a request is checked for what only it can get wrong (a result that answers no call).
 */
import { t } from "elysia";
import { InvalidInput } from "../../errors";
import { NO_PARAMETERS, type ToolCall, type ToolRequest } from "../../llm/tools";
import { optional } from "../sampling-fields";

const TOOL_RULE = 'each tool must be {type: "function", function: {name, description?, parameters?, strict?}}, its name of letters, digits, _ and - (at most 64)';

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
            // Parley holds every call it forces to the schema, strict or not (docs/API.md says when).
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

/** Tools as a request offers them, whatever the protocol's shape. */
export interface OfferedTools {
  functions: readonly { name: string; description?: string | null; parameters?: Record<string, unknown> | null }[];
  choice: "none" | "auto" | "required" | { name: string } | undefined;
  parallel: boolean | null | undefined;
  /** The param naming the i-th function's name, as the protocol spells it. */
  nameParam(i: number): string;
}

/** Chat completions' tool fields as offered tools. */
export function chatTools(body: {
  tools?: { function: { name: string; description?: string | null; parameters?: Record<string, unknown> | null } }[] | null;
  tool_choice?: "none" | "auto" | "required" | { function: { name: string } } | null;
  parallel_tool_calls?: boolean | null;
}): OfferedTools {
  const choice = body.tool_choice ?? undefined;
  return {
    functions: (body.tools ?? []).map((tool) => tool.function),
    choice: typeof choice === "object" ? { name: choice.function.name } : choice,
    parallel: body.parallel_tool_calls,
    nameParam: (i) => `tools[${i}].function.name`,
  };
}

/** The tools the reply may call; none when none are offered or the choice is `"none"`. */
export function toolRequestOf({ functions, choice = "auto", parallel, nameParam }: OfferedTools): ToolRequest | undefined {
  if (functions.length === 0 && choice !== "none" && choice !== "auto") throw new InvalidInput("tool_choice", "tool_choice asks for a call, but no tools are offered");
  const seen = new Set<string>();
  for (const [i, fn] of functions.entries()) {
    if (seen.has(fn.name)) throw new InvalidInput(nameParam(i), `two tools are named ${JSON.stringify(fn.name)}`);
    seen.add(fn.name);
  }
  if (functions.length === 0 || choice === "none") return undefined;
  return {
    functions: functions.map((fn) => ({
      name: fn.name,
      ...(fn.description != null ? { description: fn.description } : {}),
      parameters: fn.parameters ?? NO_PARAMETERS,
    })),
    choice,
    parallel: parallel ?? true,
  };
}

/** An assistant message's calls, each one's arguments a JSON object as the API returned them. */
export function callsOf(calls: readonly { id: string; function: { name: string; arguments: string } }[], at: string): ToolCall[] {
  return calls.map(({ id, function: fn }, j) => ({ id, name: fn.name, arguments: checkedArguments(fn.arguments, `${at}.tool_calls[${j}].function.arguments`) }));
}

/** A call's arguments as given, once they are seen to be a JSON object (`InvalidInput` naming `param` if not). */
export function checkedArguments(text: string, param: string): string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new InvalidInput(param, "a call's arguments must be a JSON object, as text");
  return text;
}
