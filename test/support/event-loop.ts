/** Whether the server's event loop stays free while a request works: what another client sees meanwhile. */
import { expect } from "bun:test";

/**
 * The event loop's worst lateness while `work` runs, from a 10 ms timer, and the slowest `/healthz`
 * of the server at `url`, asked by a concurrent client on every tick it is not already waiting for
 * an answer.
 */
export async function watchLoop<T>(url: string, work: () => Promise<T>): Promise<{ value: T; worstDelayMs: number; worstHealthMs: number }> {
  let worstDelayMs = 0;
  let worstHealthMs = 0;
  let asking: Promise<void> | undefined;
  let last = performance.now();
  const probe = setInterval(() => {
    const now = performance.now();
    worstDelayMs = Math.max(worstDelayMs, now - last - 10);
    last = now;
    asking ??= fetch(`${url}/healthz`).then((response) => {
      expect(response.status).toBe(200);
      worstHealthMs = Math.max(worstHealthMs, performance.now() - now);
      asking = undefined;
    });
  }, 10);
  try {
    return { value: await work(), worstDelayMs, worstHealthMs };
  } finally {
    clearInterval(probe);
    await asking;
  }
}
