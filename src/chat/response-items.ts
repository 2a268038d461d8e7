/**
 * A kept response's items and the turns the model is given: the history of a chain is its links'
 * input and output items in order, then the new input. Items are the Responses API's; turns the
 * engine's.
 */
import type { StoredItem } from "../db/types";
import { InvalidInput } from "../errors";
import type { ToolCall, Turn } from "../llm/engine";
import type { CompletionResult } from "./completions";

/** A page of items, as OpenAI's lists take one. */
export interface ItemPageQuery {
  order: "asc" | "desc";
  /** Items after the one with this id, in `order`. */
  after?: string;
  limit: number;
}

export interface ItemPage {
  items: StoredItem[];
  hasMore: boolean;
}

/** The page of `ordered` (already in the query's order) after `after`; an `after` not among them is `InvalidInput`. */
export function pageOf(ordered: readonly StoredItem[], { after, limit }: ItemPageQuery, where: string): ItemPage {
  const from = after === undefined ? 0 : ordered.findIndex((item) => item.id === after) + 1;
  if (from === 0 && after !== undefined) throw new InvalidInput({ part: "pageAfter" }, `no item ${JSON.stringify(after)} in ${where}`);
  return { items: ordered.slice(from, from + limit), hasMore: ordered.length > from + limit };
}

/** An item as a request gives it: its id is kept when it has one, else the response gives it one. */
export type ItemInput = StoredItem extends infer I ? (I extends StoredItem ? Omit<I, "id"> & { id?: string } : never) : never;

/** An item a request names by the id of one of its user's kept responses' items, in place of the item. */
export interface ItemReference {
  type: "reference";
  id: string;
}

/** The kept response whose item this is, for an id Parley gave (its response's hex, `outputItemId`, `inputItems`); undefined for another. */
export function responseIdOfItem(itemId: string): string | undefined {
  const stemmed = /^(?:msg|fc|fco|rs)_([0-9a-f]{32})(?:_|$)/.exec(itemId);
  return stemmed ? `resp_${stemmed[1]}` : undefined;
}

const PREFIXES = { message: "msg", function_call: "fc", function_call_output: "fco", reasoning: "rs" } as const;

/** The hex of a response's id, which its items' ids carry. */
const stem = (responseId: string) => responseId.slice("resp_".length);

export const newResponseId = () => `resp_${crypto.randomUUID().replaceAll("-", "")}`;

/**
 * An output item's id: one reasoning and one message per response, calls by their place. Fixed by
 * the response's id, so a stream names its items as the kept response does.
 */
export function outputItemId(responseId: string, type: "reasoning" | "message"): string;
export function outputItemId(responseId: string, type: "function_call", call: number): string;
export function outputItemId(responseId: string, type: "reasoning" | "message" | "function_call", call?: number): string {
  return `${PREFIXES[type]}_${stem(responseId)}${call === undefined ? "" : `_${call}`}`;
}

/** The request's items with ids: those it gave, else ones of this response. */
export const inputItems = (responseId: string, items: readonly ItemInput[]): StoredItem[] =>
  items.map((item, i) => ({ ...item, id: item.id ?? `${PREFIXES[item.type]}_${stem(responseId)}_in${i}` }) as StoredItem);

/** What a turn's result adds: its thought, its answer (an empty one when it called nothing), its calls. */
export function outputItems(responseId: string, result: Pick<CompletionResult, "text" | "reasoning" | "toolCalls">): StoredItem[] {
  return [
    ...(result.reasoning !== undefined ? [{ type: "reasoning" as const, id: outputItemId(responseId, "reasoning"), text: result.reasoning }] : []),
    ...(result.text !== "" || !result.toolCalls
      ? [{ type: "message" as const, id: outputItemId(responseId, "message"), role: "assistant" as const, text: result.text }]
      : []),
    ...(result.toolCalls ?? []).map((call, i) => ({
      type: "function_call" as const,
      id: outputItemId(responseId, "function_call", i),
      callId: call.id,
      name: call.name,
      arguments: call.arguments,
    })),
  ];
}

/**
 * The turns of `instructions`, then the earlier items, then the new ones. A function call joins the
 * assistant turn before it (or makes one); its output answers a call made before it (a new one
 * that answers none is refused, naming `input[i]`); a reasoning item is the thought of the
 * assistant turn that follows.
 */
export function historyOf(instructions: string | undefined, earlier: readonly StoredItem[], input: readonly StoredItem[]): Turn[] {
  const turns: Turn[] = instructions ? [{ role: "system", content: instructions }] : [];
  const calls = new Set<string>();
  let thought: string | undefined;
  const takeThought = (): { reasoning?: string } => {
    const taken = thought ? { reasoning: thought } : {};
    thought = undefined;
    return taken;
  };
  for (const [i, entry] of [...earlier, ...input].entries()) {
    const last = turns.at(-1);
    switch (entry.type) {
      case "function_call": {
        const call: ToolCall = { id: entry.callId, name: entry.name, arguments: entry.arguments };
        calls.add(call.id);
        if (last?.role === "assistant" && thought === undefined) last.toolCalls = [...(last.toolCalls ?? []), call];
        else turns.push({ role: "assistant", content: "", ...takeThought(), toolCalls: [call] });
        break;
      }
      case "function_call_output":
        // An earlier link's output may answer a call of a link that no longer reaches the prompt.
        if (i >= earlier.length && !calls.has(entry.callId)) {
          throw new InvalidInput(
            { part: "history", item: i - earlier.length, detail: "answers" },
            `a tool's result must answer an earlier call (${JSON.stringify(entry.callId)} answers none)`,
          );
        }
        turns.push({ role: "tool", content: entry.output, toolCallId: entry.callId });
        break;
      case "reasoning":
        thought = (thought ?? "") + entry.text;
        break;
      case "message":
        if (entry.role === "assistant") turns.push({ role: "assistant", content: entry.text, ...takeThought() });
        else turns.push({ role: entry.role === "developer" ? "system" : entry.role, content: entry.text });
    }
  }
  return turns;
}
