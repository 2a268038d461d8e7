/** API keys apart from where they are kept: their form, their digest, how often their use is recorded. */

const KEY_PREFIX = "pk_";
const SHOWN_CHARS = KEY_PREFIX.length + 6;
/** Writing `last_used_at` on every request would add a write per read; a minute is precise enough. */
const LAST_USED_RESOLUTION_MS = 60_000;

/** SHA-256 of the whole key: keys are 256-bit random, so a slow hash would add nothing. */
export const hashKey = (key: string): string => new Bun.CryptoHasher("sha256").update(key).digest("hex");

export function generateKey(): string {
  return KEY_PREFIX + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
}

/** What is stored so an operator can tell keys apart; never enough to use. */
export const shownPrefix = (key: string): string => key.slice(0, SHOWN_CHARS);

/** Whether a key's use at `now` should be written down. */
export const isLastUsedStale = (lastUsedAt: number | null, now: number): boolean =>
  lastUsedAt === null || lastUsedAt < now - LAST_USED_RESOLUTION_MS;
