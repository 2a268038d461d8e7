import type { Statement } from "bun:sqlite";
import { and, asc, count, desc, eq, isNull, sql } from "drizzle-orm";
import { conversationRow, messageRecord, messageRow, rowColumns } from "../message-rows";
import type { ConversationStore } from "../storage";
import {
  CONVERSATION_TITLE_CHARS,
  type ConversationPage,
  type ConversationQuery,
  type ConversationRef,
  type ConversationRow,
  type FoundConversation,
  type MessageRecord,
  type NewMessage,
  type RowQuery,
  type StoredConversation,
  type StoredTurn,
  storedTurn,
} from "../types";
import type { Db } from "./client";
import { conversationMessageCounts, conversations, messages } from "./schema";

/**
 * A page of a user's conversations in two steps, like the message listing: the page's ids are
 * picked by sorting the user's conversations on their count rows' `updated_at` (one row each,
 * found by primary key), then only those rows get their title: the first user message, found
 * through `(conversation_id, created_at, id)`.
 */
function listStatement(db: Db) {
  const updatedAt = sql<number>`coalesce(${conversationMessageCounts.updatedAt}, ${conversations.createdAt})`;
  const page = db
    .select({ id: conversations.id, updatedAt: updatedAt.as("last_activity") })
    .from(conversations)
    .leftJoin(conversationMessageCounts, eq(conversationMessageCounts.conversationId, conversations.id))
    .where(eq(conversations.userId, sql.placeholder("userId")))
    .orderBy(desc(updatedAt), desc(conversations.id))
    .limit(sql.placeholder("limit"))
    .offset(sql.placeholder("offset"))
    .as("page");
  const title = db
    .select({ title: sql<string>`substr(${messages.content}, 1, ${sql.raw(String(CONVERSATION_TITLE_CHARS))})` })
    .from(messages)
    .where(and(eq(messages.conversationId, conversations.id), eq(messages.role, "user"), isNull(messages.item)))
    .orderBy(asc(messages.createdAt), asc(messages.id))
    .limit(1);
  return db
    .select({
      conversationId: conversations.externalId,
      createdAt: conversations.createdAt,
      updatedAt: page.updatedAt,
      messageCount: sql<number>`coalesce(${conversationMessageCounts.messageCount}, 0)`,
      title: sql<string>`coalesce((${title}), '')`,
    })
    .from(page)
    .innerJoin(conversations, eq(conversations.id, page.id))
    .leftJoin(conversationMessageCounts, eq(conversationMessageCounts.conversationId, conversations.id))
    .orderBy(desc(page.updatedAt), desc(page.id))
    .prepare();
}

const ROW = rowColumns(messages);

export class SqliteConversationStore implements ConversationStore {
  /** A conversation's turns newest first, along messages_conversation_created_idx (no sort step). */
  private readonly newestFirst: Statement<Pick<MessageRecord, "role" | "content" | "reasoning"> & { item: string | null; images: string | null }, [number]>;
  private readonly listPage;
  private readonly countAll;

  constructor(private readonly db: Db) {
    const query = db
      .select({ role: messages.role, content: messages.content, reasoning: messages.reasoning, item: messages.item, images: messages.images })
      .from(messages)
      .where(eq(messages.conversationId, sql.placeholder("conversationId")))
      .orderBy(desc(messages.createdAt), desc(messages.id));
    this.newestFirst = db.$client.prepare(query.toSQL().sql);
    this.listPage = listStatement(db);
    this.countAll = db
      .select({ n: count() })
      .from(conversations)
      .where(eq(conversations.userId, sql.placeholder("userId")))
      .prepare();
  }

  async findOrCreate(userId: number, externalId: string, metadata?: Record<string, string>): Promise<FoundConversation> {
    // Immediate: see SqliteKeyStore.create.
    return this.db.transaction(
      (tx) => {
        const existing = tx
          .select({ id: conversations.id })
          .from(conversations)
          .where(and(eq(conversations.userId, userId), eq(conversations.externalId, externalId)))
          .get();
        if (existing) return { id: existing.id, userId, externalId, created: false };
        const row = tx.insert(conversations).values({ userId, externalId, metadata }).returning({ id: conversations.id }).get();
        return { id: row.id, userId, externalId, created: true };
      },
      { behavior: "immediate" },
    );
  }

  async find(userId: number, externalId: string): Promise<StoredConversation | undefined> {
    const row = this.db
      .select({ id: conversations.id, createdAt: conversations.createdAt, metadata: conversations.metadata })
      .from(conversations)
      .where(and(eq(conversations.userId, userId), eq(conversations.externalId, externalId)))
      .get();
    return row && { id: row.id, userId, externalId, createdAt: row.createdAt, metadata: row.metadata ?? {} };
  }

  async setMetadata(userId: number, externalId: string, metadata: Record<string, string>): Promise<StoredConversation | undefined> {
    const row = this.db
      .update(conversations)
      .set({ metadata })
      .where(and(eq(conversations.userId, userId), eq(conversations.externalId, externalId)))
      .returning({ id: conversations.id, createdAt: conversations.createdAt })
      .get();
    return row && { id: row.id, userId, externalId, createdAt: row.createdAt, metadata };
  }

  async addMessages(conversation: ConversationRef, added: readonly NewMessage[]): Promise<MessageRecord[]> {
    return this.db.transaction(
      (tx) => added.map((message) => messageRecord(conversation, tx.insert(messages).values(messageRow(conversation, message)).returning().get())),
      { behavior: "immediate" },
    );
  }

  async rows(conversationId: number, { order, from, limit }: RowQuery): Promise<ConversationRow[] | undefined> {
    const direction = order === "asc" ? asc : desc;
    const filters = [eq(messages.conversationId, conversationId)];
    if (from !== undefined) {
      const start = this.db
        .select({ id: messages.id, createdAt: messages.createdAt })
        .from(messages)
        .where(and(eq(messages.conversationId, conversationId), eq(messages.itemId, from)))
        .get();
      if (!start) return undefined;
      filters.push(
        order === "asc"
          ? sql`(${messages.createdAt}, ${messages.id}) >= (${start.createdAt}, ${start.id})`
          : sql`(${messages.createdAt}, ${messages.id}) <= (${start.createdAt}, ${start.id})`,
      );
    }
    return this.db
      .select(ROW)
      .from(messages)
      .where(and(...filters))
      .orderBy(direction(messages.createdAt), direction(messages.id))
      .limit(limit)
      .all()
      .map(conversationRow);
  }

  async row(conversationId: number, itemId: string): Promise<ConversationRow | undefined> {
    const row = this.db
      .select(ROW)
      .from(messages)
      .where(and(eq(messages.conversationId, conversationId), eq(messages.itemId, itemId)))
      .get();
    return row && conversationRow(row);
  }

  async deleteRow(conversationId: number, itemId: string, reasoningOnly: boolean): Promise<boolean> {
    const where = and(eq(messages.conversationId, conversationId), eq(messages.itemId, itemId));
    const changed = reasoningOnly
      ? this.db.update(messages).set({ reasoning: null }).where(where).returning({ id: messages.id }).all()
      : this.db.delete(messages).where(where).returning({ id: messages.id }).all();
    return changed.length > 0;
  }

  async addMessage(conversation: ConversationRef, message: NewMessage): Promise<MessageRecord> {
    return messageRecord(conversation, this.db.insert(messages).values(messageRow(conversation, message)).returning().get());
  }

  async recentTurns(conversationId: number, { maxChars }: { maxChars: number }): Promise<StoredTurn[]> {
    const turns: StoredTurn[] = [];
    let chars = 0;
    // Stepped row by row: the rows beyond the bound are never read.
    for (const turn of this.newestFirst.iterate(conversationId)) {
      turns.push(
        storedTurn({ ...turn, item: turn.item === null ? null : JSON.parse(turn.item), images: turn.images === null ? null : JSON.parse(turn.images) }),
      );
      chars += turn.content.length;
      if (chars >= maxChars) break;
    }
    return turns.reverse();
  }

  async list(query: ConversationQuery): Promise<ConversationPage> {
    const rows = this.listPage.all({ ...query });
    const total = this.countAll.get({ userId: query.userId })?.n ?? 0;
    return { rows, total };
  }

  /** Immediate: the write lock is taken up front, so no turn's insert interleaves with the delete. */
  async delete(userId: number, externalId: string): Promise<ConversationRef | undefined> {
    return this.db.transaction(
      (tx) => {
        const row = tx
          .select({ id: conversations.id })
          .from(conversations)
          .where(and(eq(conversations.userId, userId), eq(conversations.externalId, externalId)))
          .get();
        if (!row) return undefined;
        // The count triggers lower the user's message count row by row.
        tx.delete(messages).where(eq(messages.conversationId, row.id)).run();
        tx.delete(conversationMessageCounts).where(eq(conversationMessageCounts.conversationId, row.id)).run();
        tx.delete(conversations).where(eq(conversations.id, row.id)).run();
        return { id: row.id, userId, externalId };
      },
      { behavior: "immediate" },
    );
  }
}
