/**
 * A stored conversation's rows as items, and back. A row is a user or assistant message (the
 * native API's), or another item; an assistant message's thought is its own item, `rs_` of the
 * message's id stem.
 */
import type { ConversationItem, ConversationRow, NewMessage, StoredTurn } from "../db/types";

const stemOf = (id: string) => id.slice(id.indexOf("_") + 1);

/** The id of the thought of the assistant message with this id. */
export const thoughtId = (messageId: string) => `rs_${stemOf(messageId)}`;

/** The id of the assistant message a thought with this id is kept with. */
export const messageOfThought = (thoughtItemId: string) => `msg_${stemOf(thoughtItemId)}`;

/** What a row shows as items, in order: an assistant message's thought first. */
export function rowItems(row: Pick<ConversationRow, "itemId"> & StoredTurn): ConversationItem[] {
  const { itemId: id, item, content } = row;
  switch (item?.type) {
    case undefined:
      return [
        ...(row.reasoning !== undefined ? [{ type: "thought" as const, id: thoughtId(id), text: row.reasoning }] : []),
        { type: "message", id, role: row.role, text: content, ...(row.images ? { images: row.images } : {}) },
      ];
    case "message":
      return [{ type: "message", id, role: item.role, text: content }];
    case "thought":
      return [{ type: "thought", id, text: content }];
    case "toolCall":
      return [{ type: "toolCall", id, callId: item.callId, name: item.name, arguments: item.arguments }];
    case "toolResult":
      return [{ type: "toolResult", id, callId: item.callId, output: content }];
    case "toolList":
      return [{ type: "toolList", id, server: item.server, tools: item.tools, ...(item.error !== undefined ? { error: item.error } : {}) }];
    case "serverCall": {
      const { type, error, ...call } = item;
      return [{ type, id, ...call, output: error === null ? content : null, error }];
    }
    case "approvalRequest":
      return [{ type: "approvalRequest", id, server: item.server, name: item.name, arguments: item.arguments }];
    case "approvalResponse":
      return [
        {
          type: "approvalResponse",
          id,
          approvalRequestId: item.approvalRequestId,
          approve: item.approve,
          ...(item.reason !== undefined ? { reason: item.reason } : {}),
        },
      ];
  }
}

/**
 * The rows that store these items: a thought right before the assistant message whose id has its
 * stem becomes that message's `reasoning`, as a native turn stores it; any other is a row of its own.
 */
export function itemRows(items: readonly ConversationItem[]): NewMessage[] {
  const rows: NewMessage[] = [];
  for (const [i, entry] of items.entries()) {
    const next = items[i + 1];
    switch (entry.type) {
      case "thought":
        if (next?.type === "message" && next.role === "assistant" && thoughtId(next.id) === entry.id) continue;
        rows.push({ role: "assistant", content: entry.text, itemId: entry.id, item: { type: "thought" } });
        break;
      case "message": {
        const before = items[i - 1];
        if (entry.role === "user" || entry.role === "assistant") {
          const thought = entry.role === "assistant" && before?.type === "thought" && before.id === thoughtId(entry.id) ? { reasoning: before.text } : {};
          rows.push({ role: entry.role, content: entry.text, itemId: entry.id, ...thought, ...(entry.images ? { images: entry.images } : {}) });
        } else rows.push({ role: "user", content: entry.text, itemId: entry.id, item: { type: "message", role: entry.role } });
        break;
      }
      case "toolCall":
        rows.push({
          role: "assistant",
          content: "",
          itemId: entry.id,
          item: { type: "toolCall", callId: entry.callId, name: entry.name, arguments: entry.arguments },
        });
        break;
      case "toolResult":
        rows.push({ role: "user", content: entry.output, itemId: entry.id, item: { type: "toolResult", callId: entry.callId } });
        break;
      case "serverCall": {
        // A call has its output or its error: the output is the row's text, kept as data.
        const { id, output, ...item } = entry;
        rows.push({ role: "assistant", content: output ?? "", itemId: id, item });
        break;
      }
      case "toolList":
      case "approvalRequest":
      case "approvalResponse": {
        const { id, ...item } = entry;
        rows.push({ role: entry.type === "approvalResponse" ? "user" : "assistant", content: "", itemId: id, item });
        break;
      }
    }
  }
  return rows;
}
