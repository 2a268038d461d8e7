import { sql } from "drizzle-orm";
import type { TokenBuckets } from "../storage";
import type { Db } from "./client";
import { NOW_MS } from "./schema";

/**
 * Token buckets in the UNLOGGED table `rate_buckets`, refilled and drawn in one statement (one
 * round trip, the row locked only for that statement), timed by the database's clock.
 */
export class PgTokenBuckets implements TokenBuckets {
  constructor(private readonly db: Db) {}

  async take(keyId: number, capacity: number, perMs: number): Promise<{ taken: boolean; tokens: number }> {
    const refilled = sql`least(${capacity}::float8, b.tokens + (${NOW_MS} - b.updated_at) * ${perMs}::float8)`;
    const [row] = await this.db.execute<{ taken: boolean; tokens: number }>(sql`
      INSERT INTO rate_buckets AS b (key_id, tokens, updated_at, taken)
      VALUES (${keyId}, ${capacity}::float8 - 1, ${NOW_MS}, true)
      ON CONFLICT (key_id) DO UPDATE SET
        tokens = CASE WHEN ${refilled} >= 1 THEN ${refilled} - 1 ELSE ${refilled} END,
        taken = ${refilled} >= 1,
        updated_at = ${NOW_MS}
      RETURNING taken, tokens`);
    return { taken: row!.taken, tokens: Number(row!.tokens) };
  }
}
