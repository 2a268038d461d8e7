import { and, asc, eq } from "drizzle-orm";
import type { ConversationStore } from "../storage";
import type { ConversationRef, FoundConversation, MessageRecord, NewMessage, StoredTurn } from "../types";
import type { Db } from "./client";
import { conversations, messages } from "./schema";

export class SqliteConversationStore implements ConversationStore {
  constructor(private readonly db: Db) {}

  async findOrCreate(userId: number, externalId: string): Promise<FoundConversation> {
    // Immediate: see SqliteKeyStore.create.
    return this.db.transaction((tx) => {
      const existing = tx
        .select({ id: conversations.id })
        .from(conversations)
        .where(and(eq(conversations.userId, userId), eq(conversations.externalId, externalId)))
        .get();
      if (existing) return { id: existing.id, userId, externalId, created: false };
      const row = tx.insert(conversations).values({ userId, externalId }).returning({ id: conversations.id }).get();
      return { id: row.id, userId, externalId, created: true };
    }, { behavior: "immediate" });
  }

  async addMessage(conversation: ConversationRef, message: NewMessage): Promise<MessageRecord> {
    const row = this.db
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

  async turns(conversationId: number): Promise<StoredTurn[]> {
    return this.db
      .select({ role: messages.role, content: messages.content })
      .from(messages)
      .where(eq(messages.conversationId, conversationId))
      .orderBy(asc(messages.createdAt), asc(messages.id))
      .all();
  }
}
