import { and, desc, eq } from "drizzle-orm";
import type { ConversationStore } from "../storage";
import type { ConversationRef, FoundConversation, MessageRecord, NewMessage, StoredTurn } from "../types";
import type { Db } from "./client";
import { conversations, messages } from "./schema";

/** Rows fetched per round trip while stepping back through a conversation. */
const TURNS_PER_FETCH = 32;

export class PgConversationStore implements ConversationStore {
  /** A conversation's turns newest first; `$1` is its row id. */
  private readonly newestFirst: string;

  constructor(private readonly db: Db) {
    this.newestFirst = db
      .select({ role: messages.role, content: messages.content })
      .from(messages)
      .where(eq(messages.conversationId, 0))
      .orderBy(desc(messages.createdAt), desc(messages.id))
      .toSQL().sql;
  }

  async findOrCreate(userId: number, externalId: string): Promise<FoundConversation> {
    // Another node may create the same conversation at the same moment: the unique index decides.
    const [created] = await this.db
      .insert(conversations)
      .values({ userId, externalId })
      .onConflictDoNothing({ target: [conversations.userId, conversations.externalId] })
      .returning({ id: conversations.id });
    if (created) return { id: created.id, userId, externalId, created: true };
    const [existing] = await this.db
      .select({ id: conversations.id })
      .from(conversations)
      .where(and(eq(conversations.userId, userId), eq(conversations.externalId, externalId)));
    return { id: existing!.id, userId, externalId, created: false };
  }

  async addMessage(conversation: ConversationRef, message: NewMessage): Promise<MessageRecord> {
    const [row] = await this.db
      .insert(messages)
      .values({ ...message, userId: conversation.userId, conversationId: conversation.id })
      .returning();
    return {
      id: row!.id,
      role: row!.role,
      content: row!.content,
      createdAt: row!.createdAt,
      userId: row!.userId,
      finishReason: row!.finishReason,
      conversationId: conversation.externalId,
    };
  }

  async recentTurns(conversationId: number, { maxChars }: { maxChars: number }): Promise<StoredTurn[]> {
    const turns: StoredTurn[] = [];
    let chars = 0;
    // Read through a cursor, a few rows at a time: the rows beyond the bound are never fetched.
    // Counted in JavaScript, as SQLite's does: the bound is in UTF-16 units, PostgreSQL counts code points.
    stepping: for await (const rows of this.db.$client.unsafe<StoredTurn[]>(this.newestFirst, [conversationId]).cursor(TURNS_PER_FETCH)) {
      for (const turn of rows) {
        turns.push({ role: turn.role, content: turn.content });
        chars += turn.content.length;
        if (chars >= maxChars) break stepping;
      }
    }
    return turns.reverse();
  }
}
