import type { StreamSlots, TokenBuckets } from "../db/storage";
import { type Quota, RateLimited } from "../errors";
import { NODE_ID } from "../node-id";

interface Bucket {
  tokens: number;
  updatedAt: number;
}

/** Buckets of this process alone: right for one node (SQLite); see `Storage.buckets` for several. */
export class MemoryBuckets implements TokenBuckets {
  private readonly buckets = new Map<number, Bucket>();

  constructor(private readonly now: () => number = Date.now) {}

  async take(keyId: number, capacity: number, perMs: number): Promise<{ taken: boolean; tokens: number }> {
    const now = this.now();
    const bucket = this.buckets.get(keyId) ?? { tokens: capacity, updatedAt: now };
    bucket.tokens = Math.min(capacity, bucket.tokens + (now - bucket.updatedAt) * perMs);
    bucket.updatedAt = now;
    this.buckets.set(keyId, bucket);
    const taken = bucket.tokens >= 1;
    if (taken) bucket.tokens -= 1;
    return { taken, tokens: bucket.tokens };
  }
}

/** Stream slots of this process alone: right for one node (SQLite); see `Storage.streams` for several. */
export class MemoryStreamSlots implements StreamSlots {
  private readonly keys = new Map<string, number>();

  async take(keyId: number, holder: string, max: number): Promise<boolean> {
    let open = 0;
    for (const key of this.keys.values()) if (key === keyId) open++;
    if (open >= max) return false;
    this.keys.set(holder, keyId);
    return true;
  }

  async renew(): Promise<void> {}

  async release(holder: string): Promise<void> {
    this.keys.delete(holder);
  }
}

/** How long a stream's slot outlives its process when that process dies: renewed at a third of it. */
const SLOT_TTL_MS = 30_000;

/** An allowance as headers: `<prefix>-limit`, `-remaining`, and `-reset` in seconds. */
const allowanceHeaders = (prefix: string, quota: Quota): Record<string, string> => ({
  [`${prefix}-limit`]: String(quota.limit),
  [`${prefix}-remaining`]: String(quota.remaining),
  [`${prefix}-reset`]: String(Math.ceil(quota.resetMs / 1000)),
});

/** The `X-RateLimit-*` headers: every response to a limited key carries its quota. */
export const quotaHeaders = (quota: Quota) => allowanceHeaders("x-ratelimit", quota);

/** The `X-Quota-*` headers: a user's token budget, on the responses of a user a quota applies to. */
export const tokenQuotaHeaders = (quota: Quota) => allowanceHeaders("x-quota", quota);

/**
 * Per-key admission: a token bucket of `perMinute` requests (refilled continuously, so a key
 * may burst up to the full minute's allowance) and a cap on concurrent streams. Buckets and stream
 * slots are the storage's when it is shared by several nodes (one limit across them all), else
 * this process's. Keys are issued by the operator, so the maps stay as small as the key table.
 */
export class RateLimiter {
  /** This process's open streams' slots, renewed together while any is open. */
  private readonly held = new Set<string>();
  private renewal: Timer | undefined;
  private opened = 0;

  constructor(
    readonly perMinute: number,
    readonly maxStreams: number,
    /** Told of every refusal, with its reason (`requests` or `streams`), e.g. to count it. */
    private readonly onReject: (reason: "requests" | "streams") => void = () => {},
    private readonly buckets: TokenBuckets = new MemoryBuckets(),
    private readonly slots: StreamSlots = new MemoryStreamSlots(),
  ) {}

  /**
   * Takes one request from the key's bucket. Resolves to the headers every response to the key
   * carries, or rejects with RateLimited when the bucket is empty. A limit of 0 means no limit (no headers).
   */
  async take(keyId: number): Promise<Record<string, string>> {
    if (this.perMinute === 0) return {};
    const perMs = this.perMinute / 60_000;
    const { taken, tokens } = await this.buckets.take(keyId, this.perMinute, perMs);
    const quota = { limit: this.perMinute, remaining: Math.floor(tokens), resetMs: (this.perMinute - tokens) / perMs };
    if (!taken) {
      this.onReject("requests");
      throw new RateLimited(`this key may make at most ${this.perMinute} requests per minute`, (1 - tokens) / perMs, quota);
    }
    return quotaHeaders(quota);
  }

  /** Counts a stream against the key; the returned function ends it (idempotent). */
  async openStream(keyId: number): Promise<() => void> {
    const holder = `${NODE_ID}-${++this.opened}`;
    if (!(await this.slots.take(keyId, holder, this.maxStreams, SLOT_TTL_MS))) {
      this.onReject("streams");
      throw new RateLimited(`this key may hold at most ${this.maxStreams} streams at once`, 1_000);
    }
    this.held.add(holder);
    this.renewal ??= setInterval(() => void this.slots.renew([...this.held], SLOT_TTL_MS).catch(() => undefined), SLOT_TTL_MS / 3);
    let closed = false;
    return () => {
      if (closed) return;
      closed = true;
      this.held.delete(holder);
      if (this.held.size === 0) {
        clearInterval(this.renewal);
        this.renewal = undefined;
      }
      // Not given back (the database away), the slot runs out.
      void this.slots.release(holder).catch(() => undefined);
    };
  }
}
