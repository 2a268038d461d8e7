import { type Quota, RateLimited } from "../errors";

interface Bucket {
  tokens: number;
  updatedAt: number;
}

/** The `X-RateLimit-*` headers: every response to a limited key carries its quota. */
export const quotaHeaders = (quota: Quota): Record<string, string> => ({
  "x-ratelimit-limit": String(quota.limit),
  "x-ratelimit-remaining": String(quota.remaining),
  "x-ratelimit-reset": String(Math.ceil(quota.resetMs / 1000)),
});

/**
 * Per-key admission: a token bucket of `perMinute` requests (refilled continuously, so a key
 * may burst up to the full minute's allowance) and a cap on concurrent streams. Keys are issued
 * by the operator, so the maps stay as small as the key table.
 */
export class RateLimiter {
  private readonly buckets = new Map<number, Bucket>();
  private readonly streams = new Map<number, number>();

  constructor(
    readonly perMinute: number,
    readonly maxStreams: number,
    /** Told of every refusal, with its reason (`requests` or `streams`), e.g. to count it. */
    private readonly onReject: (reason: "requests" | "streams") => void = () => {},
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Takes one request from the key's bucket. Returns the headers every response to the key
   * carries, or throws RateLimited when the bucket is empty. A limit of 0 means no limit (no headers).
   */
  take(keyId: number): Record<string, string> {
    if (this.perMinute === 0) return {};
    const perMs = this.perMinute / 60_000;
    const now = this.now();
    const bucket = this.buckets.get(keyId) ?? { tokens: this.perMinute, updatedAt: now };
    bucket.tokens = Math.min(this.perMinute, bucket.tokens + (now - bucket.updatedAt) * perMs);
    bucket.updatedAt = now;
    this.buckets.set(keyId, bucket);

    const allowed = bucket.tokens >= 1;
    if (allowed) bucket.tokens -= 1;
    const quota = { limit: this.perMinute, remaining: Math.floor(bucket.tokens), resetMs: (this.perMinute - bucket.tokens) / perMs };
    if (!allowed) {
      this.onReject("requests");
      throw new RateLimited(`this key may make at most ${this.perMinute} requests per minute`, (1 - bucket.tokens) / perMs, quota);
    }
    return quotaHeaders(quota);
  }

  /** Counts a stream against the key; the returned function ends it (idempotent). */
  openStream(keyId: number): () => void {
    const open = this.streams.get(keyId) ?? 0;
    if (open >= this.maxStreams) {
      this.onReject("streams");
      throw new RateLimited(`this key may hold at most ${this.maxStreams} streams at once`, 1_000);
    }
    this.streams.set(keyId, open + 1);
    let closed = false;
    return () => {
      if (closed) return;
      closed = true;
      const left = (this.streams.get(keyId) ?? 1) - 1;
      if (left > 0) this.streams.set(keyId, left);
      else this.streams.delete(keyId);
    };
  }
}
