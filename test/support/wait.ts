/** Waiting on a condition with a deadline, never for a fixed time; and time allowed to slow tests. */
import { setDefaultTimeout } from "bun:test";

/** Resolves once `condition` holds, checking every `everyMs`; throws naming `what` after `ms`. */
export async function until(condition: () => boolean | Promise<boolean>, what: string, ms = 10_000, everyMs = 10): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(everyMs);
  }
}

/**
 * Lets `turns` turns of the event loop pass: enough for whatever is already resolved or queued to
 * run, so a test can check that something has not happened (there is no condition to wait on).
 */
export async function eventLoopTurns(turns = 5): Promise<void> {
  for (let i = 0; i < turns; i++) await new Promise((resolve) => setImmediate(resolve));
}

/**
 * Gives the calling test file's tests 30 s instead of bun's 5 s: real inference and child
 * processes outlast 5 s on a loaded machine, while a stuck one still fails instead of hanging the
 * run. Call it at the top of the file: bun scopes the default timeout to the file it is set in,
 * and a preload's setting reaches only the first file of a run (oven-sh/bun#43787).
 */
export function allowSlowTests(): void {
  setDefaultTimeout(30_000);
}

/**
 * What `promise` rejects with; one that fulfils fails the test. The SDKs' promises are Promise
 * subclasses that bun's `expect(...).rejects` reads as already resolved, so they are awaited here.
 */
export async function rejection(promise: PromiseLike<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("expected the request to fail");
}
