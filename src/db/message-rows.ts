import type { ConversationRef, ConversationRow, MessageItem, MessageRecord, NewMessage, Role, StoredImage } from "./types";
import { newItemId, storedTurn } from "./types";

/** The columns a conversation's row is read with, in either dialect. */
export interface RowColumns {
  itemId: string;
  role: Role;
  content: string;
  reasoning: string | null;
  item: MessageItem | null;
  images: StoredImage[] | null;
  createdAt: number;
}

/** The columns of `messages` a conversation's row is read with: `RowColumns`, in either dialect's table. */
export const rowColumns = <T extends Record<keyof RowColumns, unknown>>(messages: T): Pick<T, keyof RowColumns> => ({
  itemId: messages.itemId,
  role: messages.role,
  content: messages.content,
  reasoning: messages.reasoning,
  item: messages.item,
  images: messages.images,
  createdAt: messages.createdAt,
});

export const conversationRow = ({ itemId, createdAt, ...turn }: RowColumns): ConversationRow => ({ ...storedTurn(turn), itemId, createdAt });

/** A message's row: its owner's, in its conversation, with an item id. */
export const messageRow = (conversation: ConversationRef, message: NewMessage) => ({
  ...message,
  itemId: message.itemId ?? newItemId(),
  userId: conversation.userId,
  conversationId: conversation.id,
});

/** A stored row as the native API shows a message. */
export const messageRecord = (conversation: ConversationRef, row: Omit<MessageRecord, "conversationId">): MessageRecord => ({
  id: row.id,
  role: row.role,
  content: row.content,
  reasoning: row.reasoning,
  createdAt: row.createdAt,
  userId: row.userId,
  finishReason: row.finishReason,
  model: row.model,
  images: row.images,
  conversationId: conversation.externalId,
});
