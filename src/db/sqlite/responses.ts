import type { Statement } from "bun:sqlite";
import { and, asc, count, eq, getTableColumns, gt, inArray, lt, notInArray, or, sql } from "drizzle-orm";
import { CHAIN_SQL, walkChain } from "../chain-walk";
import type { ResponseStore } from "../storage";
import { ABANDONED, type ChainLink, type NewResponse, type ResponseEnd, type ResponseEvent, type ResponseRecord } from "../types";
import type { Db } from "./client";
import { responseEvents, responses } from "./schema";

/** The database's clock, as `created_at`'s default reads it. */
const NOW_MS = sql`cast(unixepoch('subsec') * 1000 as integer)`;
const RUNNING: ("queued" | "in_progress")[] = ["queued", "in_progress"];

const recordOf = ({ previousId, cancelRequested: _, leaseExpiresAt: __, ...row }: typeof responses.$inferSelect): ResponseRecord => ({
  ...row,
  previousResponseId: previousId,
});

export class SqliteResponseStore implements ResponseStore {
  private readonly chainRows: Statement<{ id: string; input: string; output: string }, [string, number]>;

  constructor(private readonly db: Db) {
    this.chainRows = db.$client.prepare(CHAIN_SQL);
  }

  async create({ previousResponseId, ...response }: NewResponse, leaseMs: number): Promise<void> {
    this.db
      .insert(responses)
      .values({ ...response, previousId: previousResponseId, status: "in_progress", output: [], leaseExpiresAt: sql`${NOW_MS} + ${leaseMs}` })
      .run();
  }

  async renew(ids: readonly string[], leaseMs: number): Promise<void> {
    if (ids.length === 0) return;
    this.db
      .update(responses)
      .set({ leaseExpiresAt: sql`${NOW_MS} + ${leaseMs}` })
      .where(and(inArray(responses.id, [...ids]), inArray(responses.status, RUNNING)))
      .run();
  }

  async finish(id: string, end: ResponseEnd): Promise<boolean> {
    return (
      this.db
        .update(responses)
        .set({ ...end, leaseExpiresAt: null })
        .where(eq(responses.id, id))
        .returning({ id: responses.id })
        .all().length > 0
    );
  }

  async get(userId: number, id: string): Promise<ResponseRecord | undefined> {
    const mine = and(eq(responses.id, id), eq(responses.userId, userId));
    const row = this.db
      .select({ ...getTableColumns(responses), lapsed: sql<number>`${responses.leaseExpiresAt} < ${NOW_MS}` })
      .from(responses)
      .where(mine)
      .get();
    if (!row) return undefined;
    const { lapsed, ...record } = row;
    // Written only for a response whose process died: a read stays a read.
    if (!lapsed || !RUNNING.includes(record.status as (typeof RUNNING)[number])) return recordOf(record);
    const failed = this.db
      .update(responses)
      .set({ status: "failed", error: ABANDONED, leaseExpiresAt: null })
      .where(and(mine, inArray(responses.status, RUNNING)))
      .returning()
      .get();
    return recordOf(failed ?? record);
  }

  async chain(userId: number, id: string, { maxChars }: { maxChars: number }): Promise<ChainLink[]> {
    function* links(rows: Iterable<{ id: string; input: string; output: string }>): Generator<ChainLink> {
      for (const row of rows) yield { id: row.id, input: JSON.parse(row.input), output: JSON.parse(row.output) };
    }
    // Stepped row by row: links past the bound are never read.
    return walkChain(links(this.chainRows.iterate(id, userId)), maxChars);
  }

  async appendEvents(id: string, events: readonly ResponseEvent[]): Promise<void> {
    if (events.length === 0) return;
    this.db
      .insert(responseEvents)
      .values(events.map((event) => ({ responseId: id, ...event })))
      .onConflictDoNothing()
      .run();
  }

  async events(id: string, afterSeq: number, limit: number): Promise<ResponseEvent[]> {
    return this.db
      .select({ seq: responseEvents.seq, type: responseEvents.type, text: responseEvents.text })
      .from(responseEvents)
      .where(and(eq(responseEvents.responseId, id), gt(responseEvents.seq, afterSeq)))
      .orderBy(asc(responseEvents.seq))
      .limit(limit)
      .all();
  }

  async requestCancel(userId: number, id: string): Promise<boolean> {
    return (
      this.db
        .update(responses)
        .set({ cancelRequested: true })
        .where(and(eq(responses.id, id), eq(responses.userId, userId)))
        .returning({ id: responses.id })
        .all().length > 0
    );
  }

  async cancelRequested(id: string): Promise<boolean> {
    return this.db.select({ asked: responses.cancelRequested }).from(responses).where(eq(responses.id, id)).get()?.asked === true;
  }

  async expire(before: number): Promise<number> {
    return this.db
      .delete(responses)
      .where(and(lt(responses.createdAt, before), or(notInArray(responses.status, RUNNING), lt(responses.leaseExpiresAt, NOW_MS))))
      .returning({ id: responses.id })
      .all().length;
  }

  async count(): Promise<number> {
    return this.db.select({ n: count() }).from(responses).get()?.n ?? 0;
  }

  async delete(userId: number, id: string): Promise<ResponseRecord | undefined> {
    const row = this.db
      .delete(responses)
      .where(and(eq(responses.id, id), eq(responses.userId, userId)))
      .returning()
      .get();
    return row && recordOf(row);
  }
}

/**
 * Ends the responses a process died generating: one process serves a SQLite database, so at its
 * start any response still running is one nothing will end. They stay readable, `failed`.
 */
export function failAbandoned(db: Db): void {
  db.update(responses).set({ status: "failed", error: ABANDONED, leaseExpiresAt: null }).where(inArray(responses.status, RUNNING)).run();
}
