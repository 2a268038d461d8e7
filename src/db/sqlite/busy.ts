/**
 * Waiting for another process's write lock without stopping the event loop. bun:sqlite is
 * synchronous: SQLite's own busy timeout sleeps inside the call, on the one thread that also
 * answers every other request (a 5 s timeout froze `/healthz` for 4.9 s). So SQLite waits only a
 * few milliseconds itself, and the storage waits out the rest between attempts, asynchronously.
 */
import { Overloaded } from "../../errors";
import { wrapMethods } from "../wrap-methods";

/** SQLite's own wait per attempt: long enough for a typical commit of another process, short for the loop. */
export const BUSY_TIMEOUT_MS = 5;
/** How long one storage call may wait for the lock in all before it gives up as `Overloaded`. */
const PATIENCE_MS = 5_000;
const FIRST_PAUSE_MS = 2;
const LONGEST_PAUSE_MS = 100;
const RETRY_AFTER_MS = 1_000;

/** SQLITE_BUSY and its extended codes (SQLITE_BUSY_SNAPSHOT, SQLITE_BUSY_RECOVERY, …). */
export const isBusy = (error: unknown): boolean =>
  typeof (error as { code?: unknown })?.code === "string" && (error as { code: string }).code.startsWith("SQLITE_BUSY");

/** What a caller sees once the lock stayed taken for longer than it would wait. */
export const databaseBusy = (): Overloaded => new Overloaded("the database is busy: another process holds its write lock; try again shortly", RETRY_AFTER_MS);

/** Runs `attempt` until it does not fail busy, pausing between tries with a growing backoff. */
export async function whileBusy<T>(attempt: () => T | Promise<T>, patienceMs = PATIENCE_MS): Promise<T> {
  const deadline = performance.now() + patienceMs;
  for (let pause = FIRST_PAUSE_MS; ; pause = Math.min(pause * 2, LONGEST_PAUSE_MS)) {
    try {
      return await attempt();
    } catch (error) {
      if (!isBusy(error)) throw error;
      const left = deadline - performance.now();
      if (left <= 0) throw databaseBusy();
      await Bun.sleep(Math.min(pause, left));
    }
  }
}

/**
 * The store with each of its methods retried while the database is busy. Sound only because every
 * method is one statement or one transaction: a failed attempt has committed nothing, so trying it
 * again repeats nothing. A method added to a store keeps that rule and gets this for free.
 */
export const patient = <T extends object>(store: T): T => wrapMethods(store, (_, call) => whileBusy(call));
