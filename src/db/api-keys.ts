/** API keys apart from where they are kept: their form, their digest, how often their use is recorded. */

const KEY_PREFIX = "pk_";
const KEY_BYTES = 32;
const GENERATED = new RegExp(`^${KEY_PREFIX}[A-Za-z0-9_-]{${Math.ceil((KEY_BYTES * 4) / 3)}}$`);
/** Of a generated key: the prefix and 6 random characters (36 of its 256 bits). */
const SHOWN_CHARS = KEY_PREFIX.length + 6;
const FINGERPRINT_HEX = 8;
/** Writing `last_used_at` on every request would add a write per read; a minute is precise enough. */
const LAST_USED_RESOLUTION_MS = 60_000;

/** SHA-256 of the whole key: keys are 256-bit random, so a slow hash would add nothing. */
export const hashKey = (key: string): string => new Bun.CryptoHasher("sha256").update(key).digest("hex");

export function generateKey(): string {
  return KEY_PREFIX + Buffer.from(crypto.getRandomValues(new Uint8Array(KEY_BYTES))).toString("base64url");
}

/**
 * What is stored and listed so an operator can tell keys apart; never enough to use. The first
 * characters of a generated key are random; those of a key an operator chose (PARLEY_ADMIN_KEY)
 * are part of a secret that may be guessable, so it is shown by a fingerprint instead: the start
 * of the digest stored beside it anyway, which tells whoever can list keys nothing new.
 */
export const shownPrefix = (key: string): string => (GENERATED.test(key) ? key.slice(0, SHOWN_CHARS) : `sha256:${hashKey(key).slice(0, FINGERPRINT_HEX)}`);

/** Whether a key's use at `now` should be written down. */
export const isLastUsedStale = (lastUsedAt: number | null, now: number): boolean => lastUsedAt === null || lastUsedAt < now - LAST_USED_RESOLUTION_MS;
