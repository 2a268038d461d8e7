import { and, asc, eq, sql } from "drizzle-orm";
import type { ConversationStore } from "../storage";
import type { ConversationRef, FoundConversation, MessageRecord, NewMessage, StoredTurn } from "../types";
import type { Db } from "./client";
import { conversations, messages } from "./schema";

export class PgConversationStore implements ConversationStore {
  private readonly history;

  constructor(private readonly db: Db) {
    this.history = db
      .select({ role: messages.role, content: messages.content })
      .from(messages)
      .where(eq(messages.conversationId, sql.placeholder("id")))
      .orderBy(asc(messages.createdAt), asc(messages.id))
      .prepare("parley_conversation_turns");
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

  async turns(conversationId: number): Promise<StoredTurn[]> {
    return this.history.execute({ id: conversationId });
  }
}
