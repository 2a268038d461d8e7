import { and, asc, count, eq, gt, lt, notInArray } from "drizzle-orm";
import { CHAIN_SQL, walkChain } from "../chain-walk";
import type { ResponseStore } from "../storage";
import type { ChainLink, NewResponse, ResponseEnd, ResponseEvent, ResponseRecord } from "../types";
import type { Db } from "./client";
import { responseEvents, responses } from "./schema";

/** Links fetched per round trip while stepping back through a chain. */
const LINKS_PER_FETCH = 16;

const recordOf = ({ previousId, cancelRequested: _, ...row }: typeof responses.$inferSelect): ResponseRecord => ({ ...row, previousResponseId: previousId });

export class PgResponseStore implements ResponseStore {
  constructor(private readonly db: Db) {}

  async create({ previousResponseId, ...response }: NewResponse): Promise<void> {
    await this.db.insert(responses).values({ ...response, previousId: previousResponseId, status: "in_progress", output: [] });
  }

  async finish(id: string, end: ResponseEnd): Promise<boolean> {
    const updated = await this.db.update(responses).set(end).where(eq(responses.id, id)).returning({ id: responses.id });
    return updated.length > 0;
  }

  async get(userId: number, id: string): Promise<ResponseRecord | undefined> {
    const [row] = await this.db
      .select()
      .from(responses)
      .where(and(eq(responses.id, id), eq(responses.userId, userId)));
    return row && recordOf(row);
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
    const asked = await this.db.update(responses).set({ cancelRequested: true }).where(and(eq(responses.id, id), eq(responses.userId, userId))).returning({ id: responses.id });
    return asked.length > 0;
  }

  async cancelRequested(id: string): Promise<boolean> {
    const [row] = await this.db.select({ asked: responses.cancelRequested }).from(responses).where(eq(responses.id, id));
    return row?.asked === true;
  }

  async expire(before: number): Promise<number> {
    const gone = await this.db
      .delete(responses)
      .where(and(lt(responses.createdAt, before), notInArray(responses.status, ["queued", "in_progress"])))
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
