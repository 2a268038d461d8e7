import { and, asc, eq, gte, sql } from "drizzle-orm";
import type { UsageDay, UsageStore } from "../storage";
import type { Db, Tx } from "./client";
import { tokenUsage } from "./schema";

/** Adds to the user's day: an upsert, so whichever node's reply ends adds atomically. */
export async function addTokens(db: Db | Tx, userId: number, day: string, promptTokens: number, completionTokens: number): Promise<void> {
  await db
    .insert(tokenUsage)
    .values({ userId, day, promptTokens, completionTokens })
    .onConflictDoUpdate({
      target: [tokenUsage.userId, tokenUsage.day],
      set: {
        promptTokens: sql`${tokenUsage.promptTokens} + excluded.prompt_tokens`,
        completionTokens: sql`${tokenUsage.completionTokens} + excluded.completion_tokens`,
      },
    });
}

export class PgUsageStore implements UsageStore {
  constructor(private readonly db: Db) {}

  async add(userId: number, day: string, promptTokens: number, completionTokens: number): Promise<void> {
    await addTokens(this.db, userId, day, promptTokens, completionTokens);
  }

  async days(userId: number, since: string): Promise<UsageDay[]> {
    return this.db
      .select({ day: tokenUsage.day, promptTokens: tokenUsage.promptTokens, completionTokens: tokenUsage.completionTokens })
      .from(tokenUsage)
      .where(and(eq(tokenUsage.userId, userId), gte(tokenUsage.day, since)))
      .orderBy(asc(tokenUsage.day));
  }
}
