/**
 * The token ledger: every reply's tokens are counted to its user's UTC day, and a user with a
 * quota (their own, or the default) has a budget per calendar period. A reply holds its share of
 * the budget before anything of its turn is stored, and settles after: what it used is counted
 * and the rest given back, so a user's concurrent replies, on any node, share the budget without
 * passing it.
 */

import type { QuotaRule, QuotaStanding, QuotaStore, UsageStore } from "../db/storage";
import type { QuotaPeriod } from "../db/types";
import { type Quota, QuotaExceeded } from "../errors";
import { NODE_ID } from "../node-id";

/**
 * A budget as a client is shown it: `remaining` is what of the limit is neither used nor held for
 * replies still generating; `resetMs` runs from when this was read until `resetsAt`, the period's
 * end (the ledger's clock may not be the wall's).
 */
export interface QuotaState extends Quota {
  period: QuotaPeriod;
  used: number;
  /** When the period ends (ms since the epoch). */
  resetsAt: number;
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
 * A hold whose node died stops counting after this, unless the generation cap allows longer
 * replies (`TokenLedger`'s `holdTtlMs`): a hold that expired while its reply still ran would let
 * its user's other replies pass the budget.
 */
export const HOLD_TTL_MS = 60 * 60_000;

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

/** The budget `rule` leaves at `now`, given the user's standing in its period. */
function stateOf(rule: QuotaRule, { used, held }: QuotaStanding, now: number): QuotaState {
  const { resetsAt } = periodOf(rule.period, now);
  return { limit: rule.tokens, period: rule.period, remaining: Math.max(0, rule.tokens - used - held), used, resetsAt, resetMs: resetsAt - now };
}

export class TokenLedger {
  private holds = 0;

  constructor(
    private readonly usage: Pick<UsageStore, "add">,
    private readonly quotas: QuotaStore,
    /** The clock periods and days are read from: a test moves it past a period's end. */
    readonly now: () => number = Date.now,
    /** How long a hold counts: at least as long as a reply may run (see `HOLD_TTL_MS`). */
    private readonly holdTtlMs = HOLD_TTL_MS,
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
    const { since } = periodOf(rule.period, now);
    const holder = `${NODE_ID}-q${++this.holds}`;
    const request = { userId, since, limit: rule.tokens, need, want, holder, expiresAt: now + this.holdTtlMs };
    const { granted, ...standing } = await this.quotas.hold(request, now);
    const state = stateOf(rule, standing, now);
    if (granted === 0) throw refusal(state, need, rule.tokens - standing.used >= need);
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
    return this.standingOf(userId, hold.rule);
  }

  /** The refusal of a reply whose prompt outgrew its hold, which was then all that was left. */
  outgrown(hold: TokenHold, promptTokens: number): QuotaExceeded {
    return refusal(stateOf(hold.rule, { used: hold.rule.tokens - hold.tokens, held: 0 }, this.now()), promptTokens + 1, false);
  }

  release(hold: TokenHold): Promise<void> {
    return this.quotas.release(hold.holder);
  }

  /** The user's budget now; undefined when no quota applies. */
  async state(userId: number): Promise<QuotaState | undefined> {
    const rule = await this.quotas.ruleFor(userId);
    return rule && this.standingOf(userId, rule);
  }

  /** The budget `rule` leaves the user now. */
  async standingOf(userId: number, rule: QuotaRule): Promise<QuotaState> {
    const now = this.now();
    return stateOf(rule, await this.quotas.standing(userId, periodOf(rule.period, now).since, now), now);
  }
}

/** How soon a reply held back by others' holds may try again: they settle as their replies end. */
const HELD_RETRY_MS = 1_000;

/** `heldBack`: what is left would do, but replies still generating hold it. */
function refusal(state: QuotaState, need: number, heldBack: boolean): QuotaExceeded {
  const resets = new Date(state.resetsAt).toISOString();
  const of = `this user's token quota (${state.limit} a ${state.period})`;
  if (heldBack) return new QuotaExceeded(`the rest of ${of} is held by replies still generating; try again when they end`, HELD_RETRY_MS, state);
  const message =
    state.used >= state.limit
      ? `${of} is used up until ${resets}`
      : `this request needs ${need} tokens (a reply counts its prompt and a first token; retrieval, its inputs); ${state.limit - state.used} of ${of} are left until ${resets}`;
  return new QuotaExceeded(message, state.resetMs, state);
}
