/**
 * A fixed set of reusable items (context sequences) handed out one request at a time, with a
 * bounded FIFO queue in front. Items remember the conversation they last served, because a
 * sequence's KV cache still holds that conversation's prompt: giving it back to the same
 * conversation turns the shared prefix into cached tokens instead of re-evaluated ones. A request
 * without a conversation scores the free items instead (the tokens each shares with its prompt).
 *
 * Otherwise an item next to busy ones is taken first: items are in the order of their sequence ids,
 * and llama.cpp computes a batch in one pass only over sequences whose ids follow one another
 * (llama_batch_allocr::split_equal, with node-llama-cpp's KV stream per sequence). Three replies
 * on sequences 0, 2 and 3 cost two passes per token, far slower than on 1, 2 and 3. (One unified KV
 * cache would lift the rule, but decoded slower with long conversations held, since every token
 * then attends over all of them.)
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
  /** Its place among the items: its sequence id. */
  readonly at: number;
  busy: boolean;
  key: string | undefined;
  /** Monotonic counter value at the last release: the least recently used free slot is reassigned first. */
  releasedAt: number;
}

/**
 * Which free item a request wants: the one that last served its conversation (a key), or the one
 * scoring highest (above 0), or for a conversation that starts here the one scoring highest, leased
 * under its key. Either way otherwise the free item with the most busy neighbours, the least
 * recently used of those.
 */
export type Preference<T> = string | ((item: T) => number) | { key: string; score: (item: T) => number };

interface Waiter<T> {
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
    this.slots = items.map((item, at) => ({ item, at, busy: false, key: undefined, releasedAt: 0 }));
  }

  /**
   * Resolves with a lease once an item is free. Rejects with `Overloaded` when the queue
   * is full, and with an `AbortError` if `signal` aborts first (the waiter leaves the queue).
   */
  acquire(preference: Preference<T>, signal?: AbortSignal): Promise<Lease<T>> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    if (signal?.aborted) return Promise.reject(abortError(signal));
    const key = typeof preference === "string" ? preference : typeof preference === "object" ? preference.key : undefined;

    const free = this.pickFree(preference);
    if (free) return Promise.resolve(this.lease(free, key));

    if (this.isFull()) return Promise.reject(new Overloaded(`All ${this.slots.length} sequences are busy and the queue is full`, 1_000));

    return new Promise<Lease<T>>((resolve, reject) => {
      const onAbort = () => {
        const index = this.waiters.indexOf(waiter);
        if (index >= 0) this.waiters.splice(index, 1);
        reject(abortError(signal!));
      };
      const waiter: Waiter<T> = {
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

  private pickFree(preference: Preference<T>): Slot<T> | undefined {
    const free = this.slots.filter((slot) => !slot.busy);
    if (typeof preference === "string") return free.find((slot) => slot.key === preference) ?? this.nextToBusy(free);
    const score = typeof preference === "object" ? preference.score : preference;
    const scores = free.map((slot) => score(slot.item));
    const top = scores.reduce((best, score) => Math.max(best, score), 0);
    return this.nextToBusy(top > 0 ? free.filter((_, i) => scores[i] === top) : free);
  }

  /** Of `candidates`, one that keeps the busy items in as few runs as it can; the least recently used of those. */
  private nextToBusy(candidates: readonly Slot<T>[]): Slot<T> | undefined {
    const busyNeighbours = ({ at }: Slot<T>) => [at - 1, at + 1].filter((i) => this.slots[i]?.busy).length;
    const most = candidates.reduce((best, slot) => Math.max(best, busyNeighbours(slot)), 0);
    return leastRecentlyUsed(candidates.filter((slot) => busyNeighbours(slot) === most));
  }

  private lease(slot: Slot<T>, key: string | undefined): Lease<T> {
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

function leastRecentlyUsed<T>(slots: readonly Slot<T>[]): Slot<T> | undefined {
  return slots.reduce<Slot<T> | undefined>((oldest, slot) => (!oldest || slot.releasedAt < oldest.releasedAt ? slot : oldest), undefined);
}

/** The error a caller sees when it gave up before any work started, like `fetch` does. */
export function abortError(signal: AbortSignal): Error {
  const err = new Error("The request was aborted before it started", { cause: signal.reason });
  err.name = "AbortError";
  return err;
}
