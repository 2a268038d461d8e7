/**
 * A fixed set of reusable items (context sequences) handed out one request at a time, with a
 * bounded FIFO queue in front. Items remember the conversation they last served, because a
 * sequence's KV cache still holds that conversation's prompt: giving it back to the same
 * conversation turns the shared prefix into cached tokens instead of re-evaluated ones.
 */
import { Overloaded } from "../errors";

/** The engine's load, as its gauges and its callers see it. */
export interface PoolStats {
  /** Items in the pool: replies that can be generated at once. */
  parallel: number;
  busy: number;
  /** Callers waiting for a free item. */
  queued: number;
}

export interface Lease<T> {
  readonly item: T;
  /** Idempotent; hands the item to the oldest waiter, if any. */
  release(): void;
}

interface Slot<T> {
  readonly item: T;
  busy: boolean;
  key: string | undefined;
  /** Monotonic counter value at the last release: the least recently used free slot is reassigned first. */
  releasedAt: number;
}

interface Waiter<T> {
  readonly key: string;
  grant(slot: Slot<T>): void;
  fail(err: unknown): void;
}

export class SequencePool<T> {
  private readonly slots: Slot<T>[];
  private readonly waiters: Waiter<T>[] = [];
  private clock = 0;
  private closedWith: Error | undefined;

  constructor(
    items: readonly T[],
    private readonly queueMax: number,
  ) {
    this.slots = items.map((item) => ({ item, busy: false, key: undefined, releasedAt: 0 }));
  }

  /**
   * Resolves with a lease once an item is free. Rejects with `Overloaded` when the queue
   * is full, and with an `AbortError` if `signal` aborts first (the waiter leaves the queue).
   */
  acquire(key: string, signal?: AbortSignal): Promise<Lease<T>> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    if (signal?.aborted) return Promise.reject(abortError(signal));

    const free = this.pickFree(key);
    if (free) return Promise.resolve(this.lease(free, key));

    if (this.isFull()) return Promise.reject(new Overloaded(`All ${this.slots.length} sequences are busy and the queue is full`, 1_000));

    return new Promise<Lease<T>>((resolve, reject) => {
      const onAbort = () => {
        const index = this.waiters.indexOf(waiter);
        if (index >= 0) this.waiters.splice(index, 1);
        reject(abortError(signal!));
      };
      const waiter: Waiter<T> = {
        key,
        grant: (slot) => {
          signal?.removeEventListener("abort", onAbort);
          resolve(this.lease(slot, key));
        },
        fail: (err) => {
          signal?.removeEventListener("abort", onAbort);
          reject(err);
        },
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }

  /** Requests the pool takes at once: one per item, and `queueMax` waiting. */
  get capacity(): number {
    return this.slots.length + this.queueMax;
  }

  /** True when `acquire` would be refused now: no free item and no room left in the queue. */
  private isFull(): boolean {
    return this.waiters.length >= this.queueMax && this.slots.every((slot) => slot.busy);
  }

  stats(): PoolStats {
    return {
      parallel: this.slots.length,
      busy: this.slots.filter((slot) => slot.busy).length,
      queued: this.waiters.length,
    };
  }

  /** Rejects every waiter and all later `acquire` calls with `reason`. Leases already out stay valid. */
  close(reason: Error): void {
    this.closedWith = reason;
    for (const waiter of this.waiters.splice(0)) waiter.fail(reason);
  }

  private pickFree(key: string): Slot<T> | undefined {
    let best: Slot<T> | undefined;
    for (const slot of this.slots) {
      if (slot.busy) continue;
      if (slot.key === key) return slot;
      if (!best || slot.releasedAt < best.releasedAt) best = slot;
    }
    return best;
  }

  private lease(slot: Slot<T>, key: string): Lease<T> {
    slot.busy = true;
    slot.key = key;
    let released = false;
    return {
      item: slot.item,
      release: () => {
        if (released) return;
        released = true;
        slot.releasedAt = ++this.clock;
        const next = this.waiters.shift();
        if (next) next.grant(slot);
        else slot.busy = false;
      },
    };
  }
}

/** The error a caller sees when it gave up before any work started, like `fetch` does. */
export function abortError(signal: AbortSignal): Error {
  const err = new Error("The request was aborted before it started", { cause: signal.reason });
  err.name = "AbortError";
  return err;
}
