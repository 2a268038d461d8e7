import type { Statement } from "bun:sqlite";
import { and, desc, eq, sql } from "drizzle-orm";
import type { ConversationStore } from "../storage";
import type { ConversationRef, FoundConversation, MessageRecord, NewMessage, StoredTurn } from "../types";
import type { Db } from "./client";
import { conversations, messages } from "./schema";

export class SqliteConversationStore implements ConversationStore {
  /** A conversation's turns newest first, along messages_conversation_created_idx (no sort step). */
  private readonly newestFirst: Statement<StoredTurn, [number]>;

  constructor(private readonly db: Db) {
    const query = db
      .select({ role: messages.role, content: messages.content })
      .from(messages)
      .where(eq(messages.conversationId, sql.placeholder("conversationId")))
      .orderBy(desc(messages.createdAt), desc(messages.id));
    this.newestFirst = db.$client.prepare<StoredTurn, [number]>(query.toSQL().sql);
  }

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

  async recentTurns(conversationId: number, { maxChars }: { maxChars: number }): Promise<StoredTurn[]> {
    const turns: StoredTurn[] = [];
    let chars = 0;
    // Stepped row by row: the rows beyond the bound are never read.
    for (const turn of this.newestFirst.iterate(conversationId)) {
      turns.push(turn);
      chars += turn.content.length;
      if (chars >= maxChars) break;
    }
    return turns.reverse();
  }
}
