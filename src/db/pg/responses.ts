import { and, asc, count, eq, getTableColumns, gt, inArray, lt, notInArray, or, sql } from "drizzle-orm";
import { CHAIN_SQL, walkChain } from "../chain-walk";
import type { ResponseStore } from "../storage";
import { ABANDONED, type ChainLink, type NewResponse, type ResponseEnd, type ResponseEvent, type ResponseRecord } from "../types";
import type { Db } from "./client";
import { NOW_MS, responseEvents, responses } from "./schema";

/** Links fetched per round trip while stepping back through a chain. */
const LINKS_PER_FETCH = 16;

const RUNNING: ("queued" | "in_progress")[] = ["queued", "in_progress"];

const recordOf = ({ previousId, cancelRequested: _, leaseExpiresAt: __, ...row }: typeof responses.$inferSelect): ResponseRecord => ({
  ...row,
  previousResponseId: previousId,
});

export class PgResponseStore implements ResponseStore {
  constructor(private readonly db: Db) {}

  async create({ previousResponseId, ...response }: NewResponse, leaseMs: number): Promise<void> {
    await this.db
      .insert(responses)
      .values({ ...response, previousId: previousResponseId, status: "in_progress", output: [], leaseExpiresAt: sql`${NOW_MS} + ${leaseMs}` });
  }

  async renew(ids: readonly string[], leaseMs: number): Promise<void> {
    if (ids.length === 0) return;
    await this.db
      .update(responses)
      .set({ leaseExpiresAt: sql`${NOW_MS} + ${leaseMs}` })
      .where(and(inArray(responses.id, [...ids]), inArray(responses.status, RUNNING)));
  }

  async finish(id: string, end: ResponseEnd): Promise<boolean> {
    const updated = await this.db
      .update(responses)
      .set({ ...end, leaseExpiresAt: null })
      .where(eq(responses.id, id))
      .returning({ id: responses.id });
    return updated.length > 0;
  }

  async get(userId: number, id: string): Promise<ResponseRecord | undefined> {
    const mine = and(eq(responses.id, id), eq(responses.userId, userId));
    const [row] = await this.db
      .select({ ...getTableColumns(responses), lapsed: sql<boolean>`${responses.leaseExpiresAt} < ${NOW_MS}` })
      .from(responses)
      .where(mine);
    if (!row) return undefined;
    const { lapsed, ...record } = row;
    // A response whose node died is failed by whichever node reads it first; any other read stays a read.
    if (!lapsed || !RUNNING.includes(record.status as (typeof RUNNING)[number])) return recordOf(record);
    const [failed] = await this.db
      .update(responses)
      .set({ status: "failed", error: ABANDONED, leaseExpiresAt: null })
      .where(and(mine, inArray(responses.status, RUNNING)))
      .returning();
    return recordOf(failed ?? record);
  }

  async chain(userId: number, id: string, { maxChars }: { maxChars: number }): Promise<ChainLink[]> {
    const client = this.db.$client;
    async function* links(): AsyncGenerator<ChainLink> {
      for await (const rows of client.unsafe<ChainLink[]>(CHAIN_SQL, [id, userId]).cursor(LINKS_PER_FETCH)) yield* rows;
    }
    return walkChain(links(), maxChars);
  }

  async appendEvents(id: string, events: readonly ResponseEvent[]): Promise<void> {
    if (events.length === 0) return;
    await this.db
      .insert(responseEvents)
      .values(events.map((event) => ({ responseId: id, ...event })))
      .onConflictDoNothing();
  }

  async events(id: string, afterSeq: number, limit: number): Promise<ResponseEvent[]> {
    return this.db
      .select({ seq: responseEvents.seq, type: responseEvents.type, text: responseEvents.text })
      .from(responseEvents)
      .where(and(eq(responseEvents.responseId, id), gt(responseEvents.seq, afterSeq)))
      .orderBy(asc(responseEvents.seq))
      .limit(limit);
  }

  async requestCancel(userId: number, id: string): Promise<boolean> {
    const asked = await this.db
      .update(responses)
      .set({ cancelRequested: true })
      .where(and(eq(responses.id, id), eq(responses.userId, userId)))
      .returning({ id: responses.id });
    return asked.length > 0;
  }

  async cancelRequested(id: string): Promise<boolean> {
    const [row] = await this.db.select({ asked: responses.cancelRequested }).from(responses).where(eq(responses.id, id));
    return row?.asked === true;
  }

  async expire(before: number): Promise<number> {
    const gone = await this.db
      .delete(responses)
      .where(and(lt(responses.createdAt, before), or(notInArray(responses.status, RUNNING), lt(responses.leaseExpiresAt, NOW_MS))))
      .returning({ id: responses.id });
    return gone.length;
  }

  async count(): Promise<number> {
    const [row] = await this.db.select({ n: count() }).from(responses);
    return row?.n ?? 0;
  }

  async delete(userId: number, id: string): Promise<ResponseRecord | undefined> {
    const [row] = await this.db
      .delete(responses)
      .where(and(eq(responses.id, id), eq(responses.userId, userId)))
      .returning();
    return row && recordOf(row);
  }
}
