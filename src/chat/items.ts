/**
 * Items (the chat layer's: messages, thoughts, tool calls and results) and the turns the model is
 * given: the history is the earlier items in order, then the new input. An item's id is a prefix,
 * a stem shared by the items one turn adds, and its place: a kept response's items carry its id's
 * hex, so a reference to one finds its response.
 */
import type { ConversationItem, StoredImage } from "../db/types";
import { InvalidInput } from "../errors";
import type { ToolCall, Turn, TurnImage } from "../llm/engine";
import type { CompletionResult } from "./completions";

/** Stored pictures as a turn holds them. */
export const turnImages = (images: readonly StoredImage[] | undefined): { images?: TurnImage[] } =>
  images?.length ? { images: images.map(({ at, base64 }) => ({ at, data: Buffer.from(base64, "base64") })) } : {};

/** A turn's pictures as they are stored. */
export const storedImages = (images: readonly TurnImage[] | undefined): { images?: StoredImage[] } =>
  images?.length ? { images: images.map(({ at, data }) => ({ at, base64: Buffer.from(data).toString("base64") })) } : {};

/** A page of items, as OpenAI's lists take one. */
export interface ItemPageQuery {
  order: "asc" | "desc";
  /** Items after the one with this id, in `order`. */
  after?: string;
  limit: number;
}

export interface ItemPage {
  items: ConversationItem[];
  hasMore: boolean;
}

/** The page of `ordered` (already in the query's order) after `after`; an `after` not among them is `InvalidInput`. */
export function pageOf(ordered: readonly ConversationItem[], { after, limit }: ItemPageQuery, where: string): ItemPage {
  const from = after === undefined ? 0 : ordered.findIndex((item) => item.id === after) + 1;
  if (from === 0 && after !== undefined) throw new InvalidInput({ part: "pageAfter" }, `no item ${JSON.stringify(after)} in ${where}`);
  return { items: ordered.slice(from, from + limit), hasMore: ordered.length > from + limit };
}

/** An item as a request gives it: its id is kept when it has one, else its turn gives it one. */
export type ItemInput = ConversationItem extends infer I ? (I extends ConversationItem ? Omit<I, "id"> & { id?: string } : never) : never;

/** An item a request names by the id of one of its user's kept responses' items, in place of the item. */
export interface ItemReference {
  type: "reference";
  id: string;
}

const PREFIXES = {
  message: "msg",
  toolCall: "fc",
  toolResult: "fco",
  thought: "rs",
  toolList: "mcpl",
  serverCall: "mcp",
  approvalRequest: "mcpr",
  approvalResponse: "mcpa",
} as const;

/** The stem of the ids of the items one turn adds: 32 hex digits. */
export const newStem = () => crypto.randomUUID().replaceAll("-", "");

/** The stem of an item id Parley gave; undefined for another. */
export function stemOfItem(itemId: string): string | undefined {
  return /^(?:msg|fc|fco|rs|mcpl|mcp|mcpr|mcpa)_([0-9a-f]{32})(?:_|$)/.exec(itemId)?.[1];
}

/**
 * A reply's item's id: one thought and one message per turn, calls by their place. Fixed by the
 * stem, so a stream names its items as they are then kept.
 */
export function replyItemId(stem: string, type: "thought" | "message"): string;
export function replyItemId(stem: string, type: "toolCall" | "serverCall" | "approvalRequest" | "toolList", call: number | string): string;
export function replyItemId(stem: string, type: keyof typeof PREFIXES, call?: number | string): string {
  return `${PREFIXES[type]}_${stem}${call === undefined ? "" : `_${call}`}`;
}

/**
 * The stem of the items a response's `step`-th model turn adds (a response that runs tools has
 * several): the first's is the response's own, so a response of one turn names its items as ever.
 */
export const stepStem = (stem: string, step: number) => (step === 0 ? stem : `${stem}_s${step}`);

/** The request's items with ids: those it gave, else ones of this stem. */
export const inputItems = (stem: string, items: readonly ItemInput[]): ConversationItem[] =>
  items.map((item, i) => ({ ...item, id: item.id ?? `${PREFIXES[item.type]}_${stem}_in${i}` }) as ConversationItem);

/**
 * What a turn's result adds: its thought, its answer (an empty one when it called nothing), its
 * calls (`calls` makes the items of those a server runs; the rest are the client's to answer).
 */
export function replyItems(
  stem: string,
  result: Pick<CompletionResult, "text" | "reasoning" | "toolCalls">,
  calls?: (call: ToolCall, id: (type: "serverCall" | "approvalRequest") => string) => ConversationItem | undefined,
): ConversationItem[] {
  return [
    ...(result.reasoning !== undefined ? [{ type: "thought" as const, id: replyItemId(stem, "thought"), text: result.reasoning }] : []),
    ...(result.text !== "" || !result.toolCalls
      ? [{ type: "message" as const, id: replyItemId(stem, "message"), role: "assistant" as const, text: result.text }]
      : []),
    ...(result.toolCalls ?? []).map(
      (call, i): ConversationItem =>
        calls?.(call, (type) => replyItemId(stem, type, i)) ?? {
          type: "toolCall",
          id: replyItemId(stem, "toolCall", i),
          callId: call.id,
          name: call.name,
          arguments: call.arguments,
        },
    ),
  ];
}

/**
 * The turns of `instructions`, then the earlier items, then the new ones. A tool call joins the
 * assistant turn before it (or makes one); a tool's result answers a call made before it (a new
 * one that answers none is refused, naming the input's item); a thought is the assistant turn's
 * that follows. A server's call is a call and its result (its error's message when it failed); a
 * call that waited for approval is a call once asked, its result whatever the answer brought.
 */
export function historyOf(instructions: string | undefined, earlier: readonly ConversationItem[], input: readonly ConversationItem[]): Turn[] {
  const turns: Turn[] = instructions ? [{ role: "system", content: instructions }] : [];
  const calls = new Set<string>();
  let thought: string | undefined;
  const takeThought = (): { reasoning?: string } => {
    const taken = thought ? { reasoning: thought } : {};
    thought = undefined;
    return taken;
  };
  const all = [...earlier, ...input];
  const made = (call: ToolCall) => {
    const last = turns.at(-1);
    calls.add(call.id);
    if (last?.role === "assistant" && thought === undefined) last.toolCalls = [...(last.toolCalls ?? []), call];
    else turns.push({ role: "assistant", content: "", ...takeThought(), toolCalls: [call] });
  };
  const answered = new Set(all.flatMap((entry) => (entry.type === "serverCall" && entry.approvalRequestId !== undefined ? [entry.approvalRequestId] : [])));
  for (const [i, entry] of all.entries()) {
    switch (entry.type) {
      case "toolCall":
        made({ id: entry.callId, name: entry.name, arguments: entry.arguments });
        break;
      case "serverCall":
        if (entry.approvalRequestId === undefined) made({ id: entry.id, name: entry.name, arguments: entry.arguments });
        turns.push({ role: "tool", content: entry.output ?? entry.error?.message ?? "", toolCallId: entry.approvalRequestId ?? entry.id });
        break;
      case "approvalRequest":
        made({ id: entry.id, name: entry.name, arguments: entry.arguments });
        break;
      case "approvalResponse":
        if (!entry.approve && !answered.has(entry.approvalRequestId))
          turns.push({ role: "tool", content: `The call was not approved${entry.reason ? `: ${entry.reason}` : "."}`, toolCallId: entry.approvalRequestId });
        break;
      case "toolList":
        break;
      case "toolResult":
        // An earlier link's output may answer a call of a link that no longer reaches the prompt.
        if (i >= earlier.length && !calls.has(entry.callId)) {
          throw new InvalidInput(
            { part: "history", item: i - earlier.length, detail: "answers" },
            `a tool's result must answer an earlier call (${JSON.stringify(entry.callId)} answers none)`,
          );
        }
        turns.push({ role: "tool", content: entry.output, toolCallId: entry.callId });
        break;
      case "thought":
        thought = (thought ?? "") + entry.text;
        break;
      case "message": {
        if (entry.role === "assistant") turns.push({ role: "assistant", content: entry.text, ...takeThought() });
        else turns.push({ role: entry.role === "developer" ? "system" : entry.role, content: entry.text, ...turnImages(entry.images) });
      }
    }
  }
  return turns;
}
