/**
 * How many tokens replies draft a step (speculative decoding, src/natives/lookup-draft.h). A
 * drafted token is accepted with about the same chance `p` as the one before it, given that one
 * was: a draft of k tokens then gains p(1 − p^k)/(1 − p) tokens a step on average. Verifying them
 * costs batch tokens: past a step's fixed cost (reading every weight once, `STEP_TOKENS` tokens'
 * worth on a CPU) each token is computed on its own, and replies stepping together draft alike (see
 * `Scheduler.draftLengths`), so a token more in each of n replies' drafts costs n tokens. The
 * length chosen is the one that gains the most tokens for its cost, none where none gains enough.
 * Each reply's `p` follows how often its recent guesses were right: drafted tokens verified, and,
 * where it drafts none, each step's guess checked against the token sampled, so a reply that does
 * not draft learns when it should.
 */

/** The longest draft. */
const MAX_DRAFT = 48;
/**
 * A step's fixed cost, in tokens' worth of computation: bench-small's batches on 2 cores took 5.8
 * ms plus 1.6 ms a token. One token alone takes another kernel (a matrix-vector product), so the
 * first drafted token costs one more.
 */
const STEP_TOKENS = 3.6;
/** What a draft must gain over a step without one: less is within the cost model's error. */
const MARGIN = 1.05;
/** The acceptance assumed of a reply that has not guessed yet. */
const PRIOR = 0.5;
/** Guesses that outweigh what was known before. */
const WINDOW = 16;

export class DraftLength {
  /** @param acceptance the chance that a drafted token is accepted, given that the one before it was */
  constructor(public acceptance = PRIOR) {}

  /** A native run of steps' guesses for the reply: how many were tried, and how many were right. */
  update(tried: number, right: number): void {
    if (tried > 0) this.acceptance += (right / tried - this.acceptance) * Math.min(1, tried / WINDOW);
  }
}

/** Tokens a draft of `length` gains a step, each accepted with `p` given the one before. */
const gained = (p: number, length: number) => (p >= 1 ? length : (p * (1 - p ** length)) / (1 - p));

/**
 * The draft length that gains the most tokens for its cost for replies stepping together with
 * these acceptances, within `most`: 0 where none gains `MARGIN`, unless `atLeastOne`. A draft
 * model's guesses cost a step of it each, as much as a step of the target model times
 * `draftWeight` (the draft model's size over the target's: decoding reads every weight once).
 */
export function draftLength(acceptances: readonly number[], most: number, atLeastOne = false, draftWeight = 0): number {
  const n = acceptances.length;
  const step = STEP_TOKENS + n;
  let best = { length: 0, rate: 1 };
  for (let length = 1; length <= Math.min(most, MAX_DRAFT); length++) {
    const tokens = acceptances.reduce((sum, p) => sum + 1 + gained(p, length), 0) / n;
    const cost = (step + n * length + (n === 1 ? 1 : 0) + length * draftWeight * step) / step;
    if (tokens / cost > best.rate) best = { length, rate: tokens / cost };
  }
  if (atLeastOne) return Math.max(best.length, Math.min(1, most));
  return best.rate >= MARGIN ? best.length : 0;
}

/** Users whose last acceptance is kept: past this many, the longest unheard of is forgotten. */
const REMEMBERED_SCOPES = 4096;

/**
 * Where a reply's guesses start: its user's last reply's acceptance, else `PRIOR`. A user whose
 * replies repeat their context drafts from the first step; one whose replies do not drafts
 * nothing until its own guesses, checked for free, say it pays. Kept per user, so no reply's pace
 * follows another user's text.
 */
export class AcceptancePriors {
  private readonly last = new Map<string, number>();

  for(scope: string): DraftLength {
    return new DraftLength(this.last.get(scope));
  }

  /** The reply's acceptance at its end, for its user's next. */
  remember(scope: string, draft: DraftLength): void {
    this.last.delete(scope);
    this.last.set(scope, draft.acceptance);
    if (this.last.size > REMEMBERED_SCOPES) this.last.delete(this.last.keys().next().value!);
  }
}
