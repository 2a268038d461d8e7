import { sql } from "drizzle-orm";
import type { StreamSlots } from "../storage";
import type { Db } from "./client";
import { NOW_MS } from "./schema";

/** Any constant the nodes agree on: with the key id, the advisory lock that counts a key's streams one taker at a time. */
const STREAMS_LOCK = 0x73747231; // "str1"

/**
 * Open streams in the UNLOGGED table `stream_slots`, one row a stream, expiring unless renewed.
 * Taking one counts the key's live rows and inserts under a transaction-scoped advisory lock of
 * the key, so two nodes cannot both take the last slot.
 */
export class PgStreamSlots implements StreamSlots {
  constructor(private readonly db: Db) {}

  async take(keyId: number, holder: string, max: number, ttlMs: number): Promise<boolean> {
    return await this.db.transaction(async (tx) => {
      await tx.execute(sql`SELECT pg_advisory_xact_lock(${STREAMS_LOCK}, ${keyId})`);
      await tx.execute(sql`DELETE FROM stream_slots WHERE key_id = ${keyId} AND expires_at < ${NOW_MS}`);
      const taken = await tx.execute(sql`
        INSERT INTO stream_slots (holder, key_id, expires_at)
        SELECT ${holder}, ${keyId}, ${NOW_MS} + ${ttlMs}
        WHERE (SELECT count(*) FROM stream_slots WHERE key_id = ${keyId}) < ${max}
        RETURNING holder`);
      return taken.length > 0;
    });
  }

  async renew(holders: readonly string[], ttlMs: number): Promise<void> {
    if (holders.length === 0) return;
    const listed = sql.join(
      holders.map((holder) => sql`${holder}`),
      sql`, `,
    );
    await this.db.execute(sql`UPDATE stream_slots SET expires_at = ${NOW_MS} + ${ttlMs} WHERE holder IN (${listed})`);
  }

  async release(holder: string): Promise<void> {
    await this.db.execute(sql`DELETE FROM stream_slots WHERE holder = ${holder}`);
  }
}
