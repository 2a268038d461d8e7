import type { ConversationLeases } from "../db/storage";
import { Overloaded } from "../errors";
import { NODE_ID } from "../node-id";

/** How this process's turns hold conversations across nodes (absent on single-process storage). */
export interface LeaseOptions {
  leases: ConversationLeases;
  /** How long a lease lasts unless renewed: how long a dead node's conversations stay blocked. */
  ttlMs: number;
  /** How long a turn waits for another node's turn of the same conversation before `Overloaded`. */
  waitMs?: number;
}

let turns = 0;

const DEFAULT_WAIT_MS = 120_000;
const FIRST_POLL_MS = 10;
const MAX_POLL_MS = 250;

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const abort = () => {
      clearTimeout(timer);
      reject(signal!.reason instanceof Error ? signal!.reason : new DOMException("aborted", "AbortError"));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", abort);
      resolve();
    }, ms);
    if (signal?.aborted) abort();
    else signal?.addEventListener("abort", abort, { once: true });
  });
}

/**
 * Waits until this turn holds the conversation's lease, renews it every third of its TTL while
 * the turn runs, and resolves to the function that gives it up. Another node's turn of the same
 * conversation is waited out (polling, bounded by `waitMs`); a dead node's lease runs out.
 */
export async function holdConversation(options: LeaseOptions, conversationId: number, signal?: AbortSignal): Promise<() => Promise<void>> {
  const { leases, ttlMs } = options;
  const owner = `${NODE_ID}-${++turns}`;
  const deadline = Date.now() + (options.waitMs ?? DEFAULT_WAIT_MS);
  for (let pause = FIRST_POLL_MS; !(await leases.lease(conversationId, owner, ttlMs)); pause = Math.min(MAX_POLL_MS, pause * 2)) {
    if (Date.now() + pause > deadline) {
      throw new Overloaded("this conversation has a turn running on another node; retry when it has finished", 1_000);
    }
    await sleep(pause, signal);
  }
  // A failed renewal (the database briefly away) is retried at the next tick, before expiry.
  const renewal = setInterval(() => void leases.lease(conversationId, owner, ttlMs).catch(() => false), Math.max(100, ttlMs / 3));
  return async () => {
    clearInterval(renewal);
    // If this fails the lease simply expires.
    await leases.release(conversationId, owner).catch(() => undefined);
  };
}
