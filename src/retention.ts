/**
 * PARLEY_RESPONSES_TTL_DAYS: kept responses older than that are deleted, at start and hourly, on
 * every node (deleting what another node already deleted deletes nothing).
 */

import type { Announce } from "./compose";
import type { ResponseStore } from "./db/storage";

const DAY_MS = 86_400_000;
const EVERY_MS = 3_600_000;

/** Starts the hourly expiry; the returned function stops it. Nothing runs when `days` is 0. */
export function expireResponses(responses: ResponseStore, days: number, announce: Announce): () => void {
  if (days === 0) return () => {};
  const expire = () =>
    responses.expire(Date.now() - days * DAY_MS).then(
      (expired) => {
        if (expired > 0) announce("info", { expired, days }, "kept responses expired");
      },
      // The next hour tries again: an expiry is never urgent.
      (error: unknown) => announce("warn", { err: String(error) }, "kept responses could not be expired now"),
    );
  void expire();
  const timer = setInterval(expire, EVERY_MS);
  return () => clearInterval(timer);
}
