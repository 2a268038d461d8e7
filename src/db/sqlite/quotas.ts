import { and, asc, eq, gt, gte, lte, sql } from "drizzle-orm";
import { DEFAULT_QUOTA_ROW, grant, quotaEntry, quotaRow } from "../quota-rows";
import type { HoldRequest, QuotaEntry, QuotaRule, QuotaStanding, QuotaStore } from "../storage";
import type { Db, Tx } from "./client";
import { tokenHolds, tokenQuotas, tokenUsage, users } from "./schema";
import { addTokens } from "./usage";

function standingIn(tx: Db | Tx, userId: number, since: string, now: number): QuotaStanding {
  const used = tx
    .select({ tokens: sql<number>`coalesce(sum(${tokenUsage.promptTokens} + ${tokenUsage.completionTokens}), 0)` })
    .from(tokenUsage)
    .where(and(eq(tokenUsage.userId, userId), gte(tokenUsage.day, since)))
    .get();
  const held = tx
    .select({ tokens: sql<number>`coalesce(sum(${tokenHolds.tokens}), 0)` })
    .from(tokenHolds)
    .where(and(eq(tokenHolds.userId, userId), eq(tokenHolds.since, since), gt(tokenHolds.expiresAt, now)))
    .get();
  return { used: used?.tokens ?? 0, held: held?.tokens ?? 0 };
}

/** One process serves from SQLite: its transactions alone make a hold atomic. */
export class SqliteQuotaStore implements QuotaStore {
  constructor(private readonly db: Db) {}

  async set(userId: number | null, rule: QuotaRule): Promise<void> {
    this.db
      .insert(tokenQuotas)
      .values({ userId: quotaRow(userId), ...rule })
      .onConflictDoUpdate({ target: tokenQuotas.userId, set: rule })
      .run();
  }

  async clear(userId: number | null): Promise<boolean> {
    const cleared = this.db
      .delete(tokenQuotas)
      .where(eq(tokenQuotas.userId, quotaRow(userId)))
      .returning({ userId: tokenQuotas.userId })
      .all();
    return cleared.length > 0;
  }

  async list(): Promise<QuotaEntry[]> {
    const rows = this.db
      .select({ userId: tokenQuotas.userId, user: users.name, tokens: tokenQuotas.tokens, period: tokenQuotas.period })
      .from(tokenQuotas)
      .leftJoin(users, eq(users.id, tokenQuotas.userId))
      .orderBy(asc(tokenQuotas.userId))
      .all();
    return rows.map(quotaEntry);
  }

  async ruleFor(userId: number): Promise<QuotaRule | undefined> {
    // A user's id is above the default's (0): descending, their own row comes first.
    return this.db
      .select({ tokens: tokenQuotas.tokens, period: tokenQuotas.period })
      .from(tokenQuotas)
      .where(sql`${tokenQuotas.userId} IN (${userId}, ${DEFAULT_QUOTA_ROW})`)
      .orderBy(sql`${tokenQuotas.userId} DESC`)
      .get();
  }

  async standing(userId: number, since: string, now: number): Promise<QuotaStanding> {
    return standingIn(this.db, userId, since, now);
  }

  async hold(request: HoldRequest, now: number): Promise<QuotaStanding & { granted: number }> {
    const { userId, since, holder, expiresAt } = request;
    return this.db.transaction(
      (tx) => {
        tx.delete(tokenHolds)
          .where(and(eq(tokenHolds.userId, userId), lte(tokenHolds.expiresAt, now)))
          .run();
        const result = grant(request, standingIn(tx, userId, since, now));
        if (result.granted > 0) tx.insert(tokenHolds).values({ holder, userId, since, tokens: result.granted, expiresAt }).run();
        return result;
      },
      { behavior: "immediate" },
    );
  }

  async settle(holder: string, userId: number, day: string, promptTokens: number, completionTokens: number): Promise<void> {
    this.db.transaction(
      (tx) => {
        addTokens(tx, userId, day, promptTokens, completionTokens);
        tx.delete(tokenHolds).where(eq(tokenHolds.holder, holder)).run();
      },
      { behavior: "immediate" },
    );
  }

  async release(holder: string): Promise<void> {
    this.db.delete(tokenHolds).where(eq(tokenHolds.holder, holder)).run();
  }
}
