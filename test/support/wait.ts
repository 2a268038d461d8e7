/** Waiting on a condition with a deadline, never for a fixed time. */

/** Resolves once `condition` holds, checking every `everyMs`; throws naming `what` after `ms`. */
export async function until(condition: () => boolean | Promise<boolean>, what: string, ms = 10_000, everyMs = 10): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(everyMs);
  }
}
