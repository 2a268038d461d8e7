import { and, asc, desc, eq, isNull, type Placeholder, type SQL, sql } from "drizzle-orm";
import type { SQLiteColumn } from "drizzle-orm/sqlite-core";
import type { MessageStore } from "../storage";
import type { MessagePage, MessageQuery, MessageRecord } from "../types";
import type { Db } from "./client";
import { RawSelect } from "./raw-select";
import { conversationMessageCounts, conversations, messages, userMessageCounts } from "./schema";

/** What a statement is built for; the values themselves are bound per request. */
type Shape = Pick<MessageQuery, "sortField" | "sortDirection"> & { byConversation: boolean };

/** A bound value or, for a prepared statement, its placeholder. */
type Values = { [K in keyof Required<Omit<MessageQuery, "sortField" | "sortDirection">>]: MessageQuery[K] | Placeholder };

const placeholders: Values = {
  userId: sql.placeholder("userId"),
  conversationId: sql.placeholder("conversationId"),
  limit: sql.placeholder("limit"),
  offset: sql.placeholder("offset"),
};

/**
 * A page in two steps: the page's messages are picked from the `(user_id, created_at, id)` index
 * (SQLite reads a table row only for rows it returns, so skipping an OFFSET of 100,000 walks the
 * index alone), then only those rows are joined to their conversations. Joining first made every
 * skipped row read its table row for the join, a deep page many times slower.
 */
function pageQuery(db: Db, shape: Shape, values: Values) {
  const direction = shape.sortDirection === "asc" ? asc : desc;
  // Only what the native API lists: the partial indexes hold exactly these rows.
  const filters: SQL[] = [eq(messages.userId, values.userId as number), isNull(messages.item)];
  if (shape.byConversation) {
    // The conversation's row id, looked up once through its unique (user_id, external_id) index.
    filters.push(
      sql`${messages.conversationId} = (SELECT ${conversations.id} FROM ${conversations} WHERE ${conversations.userId} = ${values.userId} AND ${conversations.externalId} = ${values.conversationId})`,
    );
  }
  // Ties on created_at are broken by id in the same direction, so pages never overlap.
  const order = (createdAt: SQLiteColumn, id: SQLiteColumn) => (shape.sortField === "id" ? [direction(id)] : [direction(createdAt), direction(id)]);
  const page = db
    .select({
      id: messages.id,
      role: messages.role,
      content: messages.content,
      reasoning: messages.reasoning,
      createdAt: messages.createdAt,
      userId: messages.userId,
      finishReason: messages.finishReason,
      model: messages.model,
      images: messages.images,
      conversation: messages.conversationId,
    })
    .from(messages)
    .where(and(...filters))
    .orderBy(...order(messages.createdAt, messages.id))
    .limit(values.limit as number)
    .offset(values.offset as number)
    .as("page");
  return (
    db
      .select({
        id: page.id,
        role: page.role,
        content: page.content,
        reasoning: page.reasoning,
        createdAt: page.createdAt,
        userId: page.userId,
        finishReason: page.finishReason,
        model: page.model,
        conversationId: conversations.externalId,
        images: page.images,
      })
      .from(page)
      .innerJoin(conversations, eq(conversations.id, page.conversation))
      // Satisfied by the subquery's order: SQLite adds no sort step.
      .orderBy(...order(page.createdAt, page.id))
  );
}

/** The page's statement with its values bound, exposed so a test can ask SQLite how it runs it. */
export function pageStatement(db: Db, query: MessageQuery) {
  return pageQuery(db, { ...query, byConversation: query.conversationId !== undefined }, query as Values);
}

function totalQuery(db: Db, byConversation: boolean) {
  if (!byConversation) {
    return db
      .select({ n: userMessageCounts.messageCount })
      .from(userMessageCounts)
      .where(eq(userMessageCounts.userId, sql.placeholder("userId")));
  }
  return db
    .select({ n: conversationMessageCounts.messageCount })
    .from(conversations)
    .innerJoin(conversationMessageCounts, eq(conversationMessageCounts.conversationId, conversations.id))
    .where(and(eq(conversations.userId, sql.placeholder("userId")), eq(conversations.externalId, sql.placeholder("conversationId"))));
}

/** Column order of `pageQuery`'s outer select. */
const toRecord = (values: unknown[]): MessageRecord => ({
  id: values[0] as number,
  role: values[1] as MessageRecord["role"],
  content: values[2] as string,
  reasoning: values[3] as string | null,
  createdAt: values[4] as number,
  userId: values[5] as number,
  finishReason: values[6] as MessageRecord["finishReason"],
  model: values[7] as string | null,
  conversationId: values[8] as string,
  images: values[9] === null ? null : JSON.parse(values[9] as string),
});

/** The listing, its statements prepared once per shape: eight page shapes, two totals. */
export class SqliteMessageStore implements MessageStore {
  private readonly pages = new Map<string, RawSelect<MessageRecord>>();
  private readonly totals: RawSelect<number>[];

  constructor(private readonly db: Db) {
    this.totals = [false, true].map((byConversation) => new RawSelect(db, totalQuery(db, byConversation), (values) => values[0] as number));
  }

  async list(query: MessageQuery): Promise<MessagePage> {
    const byConversation = query.conversationId !== undefined;
    const params = { userId: query.userId, conversationId: query.conversationId ?? "", limit: query.limit, offset: query.offset };
    const rows = this.page({ ...query, byConversation }).all(params);
    const total = this.totals[byConversation ? 1 : 0]!.get(params) ?? 0;
    return { rows, total };
  }

  private page(shape: Shape) {
    const key = `${shape.sortField}:${shape.sortDirection}:${shape.byConversation}`;
    let statement = this.pages.get(key);
    if (!statement) {
      statement = new RawSelect(this.db, pageQuery(this.db, shape, placeholders), toRecord);
      this.pages.set(key, statement);
    }
    return statement;
  }
}
