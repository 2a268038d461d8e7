import { and, asc, eq } from "drizzle-orm";
import type { Db } from "./client";
import type { MessageRecord } from "./messages";
import { conversations, messages, type NewMessage } from "./schema";

export interface ConversationRef {
  /** Internal row id. */
  id: number;
  userId: number;
  externalId: string;
}

/** Finds the user's conversation with this client id, creating it on first use. */
export function ensureConversation(db: Db, userId: number, externalId: string): ConversationRef & { created: boolean } {
  return db.transaction((tx) => {
    const existing = tx
      .select({ id: conversations.id })
      .from(conversations)
      .where(and(eq(conversations.userId, userId), eq(conversations.externalId, externalId)))
      .get();
    if (existing) return { id: existing.id, userId, externalId, created: false };
    const row = tx.insert(conversations).values({ userId, externalId }).returning({ id: conversations.id }).get();
    return { id: row.id, userId, externalId, created: true };
  });
}

export function insertMessage(
  db: Db,
  conversation: ConversationRef,
  message: Omit<NewMessage, "id" | "userId" | "conversationId">,
): MessageRecord {
  const row = db
    .insert(messages)
    .values({ ...message, userId: conversation.userId, conversationId: conversation.id })
    .returning()
    .get();
  return {
    id: row.id,
    role: row.role,
    content: row.content,
    createdAt: row.createdAt,
    userId: row.userId,
    finishReason: row.finishReason,
    conversationId: conversation.externalId,
  };
}

/** The conversation's turns, oldest first, as the model should see them. */
export function conversationTurns(db: Db, conversationId: number) {
  return db
    .select({ role: messages.role, content: messages.content })
    .from(messages)
    .where(eq(messages.conversationId, conversationId))
    .orderBy(asc(messages.createdAt), asc(messages.id))
    .all();
}
