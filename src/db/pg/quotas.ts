import { and, asc, eq, gt, gte, lte, sql } from "drizzle-orm";
import { DEFAULT_QUOTA_ROW, grant, quotaEntry, quotaRow } from "../quota-rows";
import type { HoldRequest, QuotaEntry, QuotaRule, QuotaStanding, QuotaStore } from "../storage";
import type { Db, Tx } from "./client";
import { tokenHolds, tokenQuotas, tokenUsage, users } from "./schema";
import { addTokens } from "./usage";

/** Any constant the nodes agree on: with the user id, the advisory lock that makes one node's hold at a time. */
const HOLDS_LOCK = 0x71756f74; // "quot"

/**
 * One statement, so one snapshot: a settlement committing meanwhile is seen whole (its tokens used,
 * its hold gone) or not at all, never counted in neither sum.
 */
async function standingIn(tx: Db | Tx, userId: number, since: string, now: number): Promise<QuotaStanding> {
  const used = tx
    .select({ tokens: sql`coalesce(sum(${tokenUsage.promptTokens} + ${tokenUsage.completionTokens}), 0)` })
    .from(tokenUsage)
    .where(and(eq(tokenUsage.userId, userId), gte(tokenUsage.day, since)));
  const held = tx
    .select({ tokens: sql`coalesce(sum(${tokenHolds.tokens}), 0)` })
    .from(tokenHolds)
    .where(and(eq(tokenHolds.userId, userId), eq(tokenHolds.since, since), gt(tokenHolds.expiresAt, now)));
  const [row] = await tx.execute<{ used: string; held: string }>(sql`SELECT (${used}) AS used, (${held}) AS held`);
  // sum() of bigint is numeric: it comes as text.
  return { used: Number(row!.used), held: Number(row!.held) };
}

/**
 * Holds are taken under a transaction-scoped advisory lock of the user, so two nodes cannot both
 * take the last tokens; a settlement adds the reply's tokens and ends its hold in one transaction,
 * which a hold being taken sees whole or not at all (`standingIn`).
 */
export class PgQuotaStore implements QuotaStore {
  constructor(private readonly db: Db) {}

  async set(userId: number | null, rule: QuotaRule): Promise<void> {
    await this.db
      .insert(tokenQuotas)
      .values({ userId: quotaRow(userId), ...rule })
      .onConflictDoUpdate({ target: tokenQuotas.userId, set: rule });
  }

  async clear(userId: number | null): Promise<boolean> {
    const cleared = await this.db
      .delete(tokenQuotas)
      .where(eq(tokenQuotas.userId, quotaRow(userId)))
      .returning({ userId: tokenQuotas.userId });
    return cleared.length > 0;
  }

  async list(): Promise<QuotaEntry[]> {
    const rows = await this.db
      .select({ userId: tokenQuotas.userId, user: users.name, tokens: tokenQuotas.tokens, period: tokenQuotas.period })
      .from(tokenQuotas)
      .leftJoin(users, eq(users.id, tokenQuotas.userId))
      .orderBy(asc(tokenQuotas.userId));
    return rows.map(quotaEntry);
  }

  async ruleFor(userId: number): Promise<QuotaRule | undefined> {
    const [rule] = await this.db
      .select({ tokens: tokenQuotas.tokens, period: tokenQuotas.period })
      .from(tokenQuotas)
      .where(sql`${tokenQuotas.userId} IN (${userId}, ${DEFAULT_QUOTA_ROW})`)
      .orderBy(sql`${tokenQuotas.userId} DESC`)
      .limit(1);
    return rule;
  }

  async standing(userId: number, since: string, now: number): Promise<QuotaStanding> {
    return standingIn(this.db, userId, since, now);
  }

  async hold(request: HoldRequest, now: number): Promise<QuotaStanding & { granted: number }> {
    const { userId, since, holder, expiresAt } = request;
    return await this.db.transaction(async (tx) => {
      await tx.execute(sql`SELECT pg_advisory_xact_lock(${HOLDS_LOCK}, ${userId})`);
      await tx.delete(tokenHolds).where(and(eq(tokenHolds.userId, userId), lte(tokenHolds.expiresAt, now)));
      const result = grant(request, await standingIn(tx, userId, since, now));
      if (result.granted > 0) await tx.insert(tokenHolds).values({ holder, userId, since, tokens: result.granted, expiresAt });
      return result;
    });
  }

  async settle(holder: string, userId: number, day: string, promptTokens: number, completionTokens: number): Promise<void> {
    await this.db.transaction(async (tx) => {
      await addTokens(tx, userId, day, promptTokens, completionTokens);
      await tx.delete(tokenHolds).where(eq(tokenHolds.holder, holder));
    });
  }

  async release(holder: string): Promise<void> {
    await this.db.delete(tokenHolds).where(eq(tokenHolds.holder, holder));
  }
}
