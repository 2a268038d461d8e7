/**
 * The token ledger: every reply's tokens are counted to its user's UTC day, and a user with a
 * quota (their own, or the default) has a budget per calendar period. A reply holds its share of
 * the budget before anything of its turn is stored, and settles after: what it used is counted
 * and the rest given back, so a user's concurrent replies, on any node, share the budget without
 * passing it.
 */
import { QuotaExceeded } from "../errors";
import type { QuotaRule, QuotaStore, UsageStore } from "../db/storage";
import type { QuotaPeriod } from "../db/types";
import { NODE_ID } from "../node-id";

/** A budget as a client is shown it. */
export interface QuotaState {
  limit: number;
  period: QuotaPeriod;
  /** Of the limit: what is neither used nor held for replies still generating. */
  remaining: number;
  used: number;
  /** When the period ends (ms since the epoch). */
  resetsAt: number;
  /** How long from when this was read until then: the ledger's clock may not be the wall's. */
  resetInMs: number;
}

/** A reply's share of its user's budget, held until it settles. */
export interface TokenHold {
  readonly holder: string;
  readonly userId: number;
  /** Prompt and reply tokens together, at most. */
  readonly tokens: number;
  readonly rule: QuotaRule;
}

/**
 * A hold whose node died stops counting after this. No reply runs this long on the hardware
 * Parley serves from; one that did could let its user pass the budget by its own hold.
 */
const HOLD_TTL_MS = 60 * 60_000;

/** The UTC day of `ms`, as usage is kept: `YYYY-MM-DD`. */
export const usageDay = (ms: number) => new Date(ms).toISOString().slice(0, 10);

/** The UTC calendar period holding `ms`: its first day and when it ends. */
export function periodOf(period: QuotaPeriod, ms: number): { since: string; resetsAt: number } {
  const at = new Date(ms);
  const [year, month, day] = [at.getUTCFullYear(), at.getUTCMonth(), at.getUTCDate()];
  const start = period === "day" ? Date.UTC(year, month, day) : Date.UTC(year, month, 1);
  const resetsAt = period === "day" ? Date.UTC(year, month, day + 1) : Date.UTC(year, month + 1, 1);
  return { since: usageDay(start), resetsAt };
}

export class TokenLedger {
  private holds = 0;

  constructor(
    private readonly usage: Pick<UsageStore, "add">,
    private readonly quotas: QuotaStore,
    /** The clock periods and days are read from: a test moves it past a period's end. */
    readonly now: () => number = Date.now,
  ) {}

  /** The user's budget: undefined when no quota applies. */
  rule(userId: number): Promise<QuotaRule | undefined> {
    return this.quotas.ruleFor(userId);
  }

  /**
   * Holds up to `want` tokens of the user's budget, or refuses with `QuotaExceeded` when less than
   * `need` is left (the prompt and one reply token).
   */
  async hold(userId: number, rule: QuotaRule, need: number, want: number): Promise<{ hold: TokenHold; state: QuotaState }> {
    const now = this.now();
    const { since, resetsAt } = periodOf(rule.period, now);
    const holder = `${NODE_ID}-q${++this.holds}`;
    const request = { userId, since, limit: rule.tokens, need, want: Math.max(need, want), holder, expiresAt: now + HOLD_TTL_MS };
    const { granted, used, held } = await this.quotas.hold(request, now);
    const state = { limit: rule.tokens, period: rule.period, remaining: Math.max(0, rule.tokens - used - held), used, resetsAt, resetInMs: resetsAt - now };
    if (granted === 0) throw refusal(state, need, rule.tokens - used >= need);
    return { hold: { holder, userId, tokens: granted, rule }, state };
  }

  /** Counts a reply's tokens; with its hold, also ends the hold (at once) and tells the budget after. */
  async settle(userId: number, hold: TokenHold | undefined, promptTokens: number, completionTokens: number): Promise<QuotaState | undefined> {
    const day = usageDay(this.now());
    if (!hold) {
      if (promptTokens + completionTokens > 0) await this.usage.add(userId, day, promptTokens, completionTokens);
      return undefined;
    }
    await this.quotas.settle(hold.holder, userId, day, promptTokens, completionTokens);
    return this.state(userId, hold.rule);
  }

  /** The refusal of a reply whose prompt outgrew its hold, which was then all that was left. */
  outgrown(hold: TokenHold, promptTokens: number): QuotaExceeded {
    const now = this.now();
    const { limit, period } = { limit: hold.rule.tokens, period: hold.rule.period };
    const { resetsAt } = periodOf(period, now);
    const state = { limit, period, remaining: hold.tokens, used: limit - hold.tokens, resetsAt, resetInMs: resetsAt - now };
    return refusal(state, promptTokens + 1, false);
  }

  release(hold: TokenHold): Promise<void> {
    return this.quotas.release(hold.holder);
  }

  /** The user's budget now; undefined when no quota applies. */
  async state(userId: number, rule?: QuotaRule): Promise<QuotaState | undefined> {
    const applied = rule ?? (await this.quotas.ruleFor(userId));
    if (!applied) return undefined;
    const now = this.now();
    const { since, resetsAt } = periodOf(applied.period, now);
    const { used, held } = await this.quotas.standing(userId, since, now);
    return { limit: applied.tokens, period: applied.period, remaining: Math.max(0, applied.tokens - used - held), used, resetsAt, resetInMs: resetsAt - now };
  }
}

/** How soon a reply held back by others' holds may try again: they settle as their replies end. */
const HELD_RETRY_MS = 1_000;

/** `heldBack`: what is left would do, but replies still generating hold it. */
function refusal(state: QuotaState, need: number, heldBack: boolean): QuotaExceeded {
  const resets = new Date(state.resetsAt).toISOString();
  const quota = { limit: state.limit, remaining: state.remaining, resetMs: state.resetInMs };
  const of = `this user's token quota (${state.limit} a ${state.period})`;
  if (heldBack) return new QuotaExceeded(`the rest of ${of} is held by replies still generating; try again when they end`, HELD_RETRY_MS, quota);
  const message =
    state.used >= state.limit
      ? `${of} is used up until ${resets}`
      : `this reply's prompt needs ${need - 1} tokens and a reply token; ${state.limit - state.used} of ${of} are left until ${resets}`;
  return new QuotaExceeded(message, quota.resetMs, quota);
}
