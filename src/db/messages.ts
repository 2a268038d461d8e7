import { and, asc, count, desc, eq, type SQL } from "drizzle-orm";
import type { Db } from "./client";
import { conversations, type Message, messages } from "./schema";

/** A stored message with its conversation's client-facing id. */
export type MessageRecord = Pick<
  Message,
  "id" | "role" | "content" | "createdAt" | "userId" | "finishReason"
> & { conversationId: string };

export type SortField = "created_at" | "id";
export type SortDirection = "asc" | "desc";

export interface MessageQuery {
  userId: number;
  conversationId?: string;
  sortField: SortField;
  sortDirection: SortDirection;
  limit: number;
  offset: number;
}

const recordColumns = {
  id: messages.id,
  role: messages.role,
  content: messages.content,
  createdAt: messages.createdAt,
  userId: messages.userId,
  finishReason: messages.finishReason,
  conversationId: conversations.externalId,
};

function filterOf(query: MessageQuery): SQL | undefined {
  const filters: SQL[] = [eq(messages.userId, query.userId)];
  if (query.conversationId !== undefined) filters.push(eq(conversations.externalId, query.conversationId));
  return and(...filters);
}

/** The page's statement, exposed so a test can ask SQLite how it runs it. */
export function pageStatement(db: Db, query: MessageQuery) {
  const direction = query.sortDirection === "asc" ? asc : desc;
  // Ties on created_at are broken by id in the same direction, so pages never overlap.
  const order = query.sortField === "id" ? [direction(messages.id)] : [direction(messages.createdAt), direction(messages.id)];
  return db
    .select(recordColumns)
    .from(messages)
    .innerJoin(conversations, eq(conversations.id, messages.conversationId))
    .where(filterOf(query))
    .orderBy(...order)
    .limit(query.limit)
    .offset(query.offset);
}

export function listMessages(db: Db, query: MessageQuery): { rows: MessageRecord[]; total: number } {
  const total =
    db
      .select({ n: count() })
      .from(messages)
      .innerJoin(conversations, eq(conversations.id, messages.conversationId))
      .where(filterOf(query))
      .get()?.n ?? 0;
  return { rows: pageStatement(db, query).all(), total };
}
