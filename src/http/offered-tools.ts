/**
 * Tools as a request offers them, whatever the protocol's shape, and the engine's tool request made
 * of them: the checks every protocol's tools share (a name used twice, a call asked for with no
 * tools), refused naming the domain's fields, which each protocol spells.
 */
import { InvalidInput } from "../errors";
import { NO_PARAMETERS, type ToolRequest } from "../llm/tools";

/** Tools as a request offers them, whatever the protocol's shape. */
export interface OfferedTools {
  /** `strict` as the protocol's default leaves it when the request says nothing. */
  /** `index`: its place among the request's tools, where others stand between (its place among the functions otherwise). */
  functions: readonly { name: string; description?: string | null; parameters?: Record<string, unknown> | null; strict: boolean; index?: number }[];
  choice: "none" | "auto" | "required" | { name: string } | undefined;
  parallel: boolean | null | undefined;
}

/** The tools the reply may call; none when none are offered or the choice is `"none"`. */
export function toolRequestOf({ functions, choice = "auto", parallel }: OfferedTools): ToolRequest | undefined {
  if (functions.length === 0 && choice !== "none" && choice !== "auto")
    throw new InvalidInput({ part: "toolChoice" }, "it asks for a call, but no tools are offered");
  const seen = new Set<string>();
  for (const [i, fn] of functions.entries()) {
    if (seen.has(fn.name)) throw new InvalidInput({ part: "tool", index: fn.index ?? i, detail: "name" }, `two tools are named ${JSON.stringify(fn.name)}`);
    seen.add(fn.name);
  }
  if (functions.length === 0 || choice === "none") return undefined;
  return {
    functions: functions.map((fn) => ({
      name: fn.name,
      ...(fn.description != null ? { description: fn.description } : {}),
      parameters: fn.parameters ?? NO_PARAMETERS,
      strict: fn.strict,
    })),
    choice,
    parallel: parallel ?? true,
  };
}
