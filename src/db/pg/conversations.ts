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
  type MessageItem,
  type MessageRecord,
  type NewMessage,
  type RowQuery,
  type StoredConversation,
  type StoredImage,
  type StoredTurn,
  storedTurn,
} from "../types";
import type { Db } from "./client";
import { conversationMessageCounts, conversations, messages } from "./schema";

/** Rows fetched per round trip while stepping back through a conversation. */
const TURNS_PER_FETCH = 32;

const ROW = rowColumns(messages);

export class PgConversationStore implements ConversationStore {
  /** A conversation's turns newest first; `$1` is its row id. */
  private readonly newestFirst: string;

  constructor(private readonly db: Db) {
    this.newestFirst = db
      .select({ role: messages.role, content: messages.content, reasoning: messages.reasoning, item: messages.item, images: messages.images })
      .from(messages)
      .where(eq(messages.conversationId, 0))
      .orderBy(desc(messages.createdAt), desc(messages.id))
      .toSQL().sql;
  }

  async findOrCreate(userId: number, externalId: string, metadata?: Record<string, string>): Promise<FoundConversation> {
    // Another node may create the same conversation at the same moment: the unique index decides.
    const [created] = await this.db
      .insert(conversations)
      .values({ userId, externalId, metadata })
      .onConflictDoNothing({ target: [conversations.userId, conversations.externalId] })
      .returning({ id: conversations.id });
    if (created) return { id: created.id, userId, externalId, created: true };
    const [existing] = await this.db
      .select({ id: conversations.id })
      .from(conversations)
      .where(and(eq(conversations.userId, userId), eq(conversations.externalId, externalId)));
    return { id: existing!.id, userId, externalId, created: false };
  }

  async find(userId: number, externalId: string): Promise<StoredConversation | undefined> {
    const [row] = await this.db
      .select({ id: conversations.id, createdAt: conversations.createdAt, metadata: conversations.metadata })
      .from(conversations)
      .where(and(eq(conversations.userId, userId), eq(conversations.externalId, externalId)));
    return row && { id: row.id, userId, externalId, createdAt: row.createdAt, metadata: row.metadata ?? {} };
  }

  async setMetadata(userId: number, externalId: string, metadata: Record<string, string>): Promise<StoredConversation | undefined> {
    const [row] = await this.db
      .update(conversations)
      .set({ metadata })
      .where(and(eq(conversations.userId, userId), eq(conversations.externalId, externalId)))
      .returning({ id: conversations.id, createdAt: conversations.createdAt });
    return row && { id: row.id, userId, externalId, createdAt: row.createdAt, metadata };
  }

  async addMessages(conversation: ConversationRef, added: readonly NewMessage[]): Promise<MessageRecord[]> {
    if (added.length === 0) return [];
    // One statement: all or none, returned in the order given.
    const rows = await this.db
      .insert(messages)
      .values(added.map((message) => messageRow(conversation, message)))
      .returning();
    return rows.map((row) => messageRecord(conversation, row));
  }

  async rows(conversationId: number, { order, from, limit }: RowQuery): Promise<ConversationRow[] | undefined> {
    const direction = order === "asc" ? asc : desc;
    const filters = [eq(messages.conversationId, conversationId)];
    if (from !== undefined) {
      const [start] = await this.db
        .select({ id: messages.id, createdAt: messages.createdAt })
        .from(messages)
        .where(and(eq(messages.conversationId, conversationId), eq(messages.itemId, from)));
      if (!start) return undefined;
      filters.push(
        order === "asc"
          ? sql`(${messages.createdAt}, ${messages.id}) >= (${start.createdAt}, ${start.id})`
          : sql`(${messages.createdAt}, ${messages.id}) <= (${start.createdAt}, ${start.id})`,
      );
    }
    const rows = await this.db
      .select(ROW)
      .from(messages)
      .where(and(...filters))
      .orderBy(direction(messages.createdAt), direction(messages.id))
      .limit(limit);
    return rows.map(conversationRow);
  }

  async row(conversationId: number, itemId: string): Promise<ConversationRow | undefined> {
    const [row] = await this.db
      .select(ROW)
      .from(messages)
      .where(and(eq(messages.conversationId, conversationId), eq(messages.itemId, itemId)));
    return row && conversationRow(row);
  }

  async deleteRow(conversationId: number, itemId: string, reasoningOnly: boolean): Promise<boolean> {
    const where = and(eq(messages.conversationId, conversationId), eq(messages.itemId, itemId));
    const changed = reasoningOnly
      ? await this.db.update(messages).set({ reasoning: null }).where(where).returning({ id: messages.id })
      : await this.db.delete(messages).where(where).returning({ id: messages.id });
    return changed.length > 0;
  }

  async addMessage(conversation: ConversationRef, message: NewMessage): Promise<MessageRecord> {
    const [row] = await this.db.insert(messages).values(messageRow(conversation, message)).returning();
    return messageRecord(conversation, row!);
  }

  async recentTurns(conversationId: number, { maxChars }: { maxChars: number }): Promise<StoredTurn[]> {
    const turns: StoredTurn[] = [];
    let chars = 0;
    // Read through a cursor, a few rows at a time: the rows beyond the bound are never fetched.
    // Counted in JavaScript, as SQLite's does: the bound is in UTF-16 units, PostgreSQL counts code points.
    stepping: for await (const rows of this.db.$client
      .unsafe<(Pick<MessageRecord, "role" | "content" | "reasoning"> & { item: MessageItem | null; images: StoredImage[] | null })[]>(this.newestFirst, [
        conversationId,
      ])
      .cursor(TURNS_PER_FETCH)) {
      for (const turn of rows) {
        turns.push(storedTurn(turn));
        chars += turn.content.length;
        if (chars >= maxChars) break stepping;
      }
    }
    return turns.reverse();
  }

  async list(query: ConversationQuery): Promise<ConversationPage> {
    // postgres.js returns bigint as text: the epoch-ms expressions are mapped back to numbers.
    const updatedAt = sql<number>`coalesce(${conversationMessageCounts.updatedAt}, ${conversations.createdAt})`.mapWith(Number);
    const title = this.db
      .select({ title: sql<string>`left(${messages.content}, ${sql.raw(String(CONVERSATION_TITLE_CHARS))})` })
      .from(messages)
      .where(and(eq(messages.conversationId, conversations.id), eq(messages.role, "user"), isNull(messages.item)))
      .orderBy(asc(messages.createdAt), asc(messages.id))
      .limit(1);
    const [rows, [total]] = await Promise.all([
      this.db
        .select({
          conversationId: conversations.externalId,
          createdAt: conversations.createdAt,
          updatedAt,
          messageCount: sql<number>`coalesce(${conversationMessageCounts.messageCount}, 0)`.mapWith(Number),
          title: sql<string>`coalesce((${title}), '')`,
        })
        .from(conversations)
        .leftJoin(conversationMessageCounts, eq(conversationMessageCounts.conversationId, conversations.id))
        .where(eq(conversations.userId, query.userId))
        .orderBy(desc(updatedAt), desc(conversations.id))
        .limit(query.limit)
        .offset(query.offset),
      this.db.select({ n: count() }).from(conversations).where(eq(conversations.userId, query.userId)),
    ]);
    return { rows, total: total?.n ?? 0 };
  }

  /** The conversation's row is locked first, so no turn's insert on another node interleaves. */
  async delete(userId: number, externalId: string): Promise<ConversationRef | undefined> {
    return this.db.transaction(async (tx) => {
      const [row] = await tx
        .select({ id: conversations.id })
        .from(conversations)
        .where(and(eq(conversations.userId, userId), eq(conversations.externalId, externalId)))
        .for("update");
      if (!row) return undefined;
      // The count trigger lowers the user's message count row by row.
      await tx.delete(messages).where(eq(messages.conversationId, row.id));
      await tx.delete(conversationMessageCounts).where(eq(conversationMessageCounts.conversationId, row.id));
      await tx.delete(conversations).where(eq(conversations.id, row.id));
      return { id: row.id, userId, externalId };
    });
  }
}
