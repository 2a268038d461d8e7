import { and, asc, desc, eq, isNull, type Placeholder, type SQL, sql } from "drizzle-orm";
import type { PgColumn } from "drizzle-orm/pg-core";
import type { MessageStore } from "../storage";
import type { MessagePage, MessageQuery } from "../types";
import type { Db } from "./client";
import { conversationMessageCounts, conversations, messages, userMessageCounts } from "./schema";

/** What a statement is built for; the values themselves are bound per request. */
type Shape = Pick<MessageQuery, "sortField" | "sortDirection"> & { byConversation: boolean };

const param = (name: keyof MessageQuery) => sql.placeholder(name);

/**
 * A page in two steps, as in SQLite: the page's ids are picked from the `(user_id, created_at, id)`
 * (or `(user_id, id)`) index alone, an index-only scan that skips an OFFSET without reading a
 * table row, then only those rows are read and joined to their conversations. The outer ORDER BY
 * sorts the page's rows alone (at most `limit`), never the user's history.
 */
function pageQuery(db: Db, shape: Shape) {
  const direction = shape.sortDirection === "asc" ? asc : desc;
  // Only what the native API lists: the partial indexes hold exactly these rows.
  const filters: SQL[] = [eq(messages.userId, param("userId")), isNull(messages.item)];
  if (shape.byConversation) {
    filters.push(
      sql`${messages.conversationId} = (SELECT ${conversations.id} FROM ${conversations} WHERE ${conversations.userId} = ${param("userId")} AND ${conversations.externalId} = ${param("conversationId")})`,
    );
  }
  // Ties on created_at are broken by id in the same direction, so pages never overlap.
  const order = (createdAt: PgColumn | SQL.Aliased, id: PgColumn | SQL.Aliased) =>
    shape.sortField === "id" ? [direction(id as PgColumn)] : [direction(createdAt as PgColumn), direction(id as PgColumn)];
  const page = db
    .select({ pageId: messages.id, pageCreatedAt: messages.createdAt })
    .from(messages)
    .where(and(...filters))
    .orderBy(...order(messages.createdAt, messages.id))
    .limit(param("limit"))
    .offset(param("offset"))
    .as("page");
  return db
    .select({
      id: messages.id,
      role: messages.role,
      content: messages.content,
      reasoning: messages.reasoning,
      createdAt: messages.createdAt,
      userId: messages.userId,
      finishReason: messages.finishReason,
      model: messages.model,
      conversationId: conversations.externalId,
      images: messages.images,
    })
    .from(page)
    .innerJoin(messages, eq(messages.id, page.pageId))
    .innerJoin(conversations, eq(conversations.id, messages.conversationId))
    .orderBy(...order(page.pageCreatedAt, page.pageId));
}

const shapeName = (shape: Shape) => `parley_page_${shape.sortField}_${shape.sortDirection}_${shape.byConversation ? "conv" : "user"}`;
const shapeOf = (query: MessageQuery): Shape => ({ ...query, byConversation: query.conversationId !== undefined });
const bindings = (query: MessageQuery): Record<string, unknown> => ({
  userId: query.userId,
  conversationId: query.conversationId ?? "",
  limit: query.limit,
  offset: query.offset,
});

/** The page's SQL and its values, exposed so a test can ask PostgreSQL how it runs it. */
export function pageStatement(db: Db, query: MessageQuery): { sql: string; params: unknown[] } {
  const built = pageQuery(db, shapeOf(query)).toSQL();
  const values = bindings(query);
  return { sql: built.sql, params: built.params.map((param) => values[(param as Placeholder).name as string]) };
}

const preparePage = (db: Db, shape: Shape) => pageQuery(db, shape).prepare(shapeName(shape));

function totalQuery(db: Db, byConversation: boolean) {
  if (!byConversation) {
    return db
      .select({ n: userMessageCounts.messageCount })
      .from(userMessageCounts)
      .where(eq(userMessageCounts.userId, param("userId")))
      .prepare("parley_total_user");
  }
  return db
    .select({ n: conversationMessageCounts.messageCount })
    .from(conversations)
    .innerJoin(conversationMessageCounts, eq(conversationMessageCounts.conversationId, conversations.id))
    .where(and(eq(conversations.userId, param("userId")), eq(conversations.externalId, param("conversationId"))))
    .prepare("parley_total_conversation");
}

/** The listing, its statements prepared once per shape: eight page shapes, two totals. */
export class PgMessageStore implements MessageStore {
  private readonly pages = new Map<string, ReturnType<typeof preparePage>>();
  private readonly totals;

  constructor(private readonly db: Db) {
    this.totals = [totalQuery(db, false), totalQuery(db, true)] as const;
  }

  async list(query: MessageQuery): Promise<MessagePage> {
    const shape = shapeOf(query);
    const params = bindings(query);
    const [rows, counted] = await Promise.all([this.page(shape).execute(params), this.totals[shape.byConversation ? 1 : 0].execute(params)]);
    return { rows, total: counted[0]?.n ?? 0 };
  }

  private page(shape: Shape) {
    const key = shapeName(shape);
    let statement = this.pages.get(key);
    if (!statement) {
      statement = preparePage(this.db, shape);
      this.pages.set(key, statement);
    }
    return statement;
  }
}
