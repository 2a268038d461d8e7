import { and, count, eq, isNull, sql } from "drizzle-orm";
import type { Db } from "./client";
import { type ApiKey, apiKeys, users } from "./schema";

export type KeyRole = ApiKey["role"];

/** Who a request acts as, once its key is verified. */
export interface Principal {
  keyId: number;
  userId: number;
  userName: string;
  role: KeyRole;
}

export interface KeyListing {
  id: number;
  user: string;
  userId: number;
  role: KeyRole;
  prefix: string;
  createdAt: number;
  lastUsedAt: number | null;
  revokedAt: number | null;
}

const KEY_PREFIX = "pk_";
const SHOWN_CHARS = KEY_PREFIX.length + 6;
/** Writing `last_used_at` on every request would add a write per read; a minute is precise enough. */
const LAST_USED_RESOLUTION_MS = 60_000;

export const hashKey = (key: string): string => new Bun.CryptoHasher("sha256").update(key).digest("hex");

function generateKey(): string {
  return KEY_PREFIX + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");
}

/** Every authenticated request runs these: prepared once, not rebuilt per request. */
function verifyStatements(db: Db) {
  return {
    lookup: db
      .select({ keyId: apiKeys.id, userId: users.id, userName: users.name, role: apiKeys.role, lastUsedAt: apiKeys.lastUsedAt })
      .from(apiKeys)
      .innerJoin(users, eq(users.id, apiKeys.userId))
      .where(and(eq(apiKeys.hash, sql.placeholder("hash")), isNull(apiKeys.revokedAt)))
      .prepare(),
    stamp: db
      .update(apiKeys)
      .set({ lastUsedAt: sql`${sql.placeholder("now")}` })
      .where(eq(apiKeys.id, sql.placeholder("id")))
      .prepare(),
  };
}

export class KeyStore {
  private readonly lookup;
  private readonly stamp;

  constructor(private readonly db: Db) {
    ({ lookup: this.lookup, stamp: this.stamp } = verifyStatements(db));
  }

  /** Creates the user if needed and a key for it; the plaintext key is returned once and never stored. */
  create(userName: string, role: KeyRole, key: string = generateKey()): { key: string; id: number; userId: number } {
    return this.db.transaction((tx) => {
      const user =
        tx.select({ id: users.id }).from(users).where(eq(users.name, userName)).get() ??
        tx.insert(users).values({ name: userName }).returning({ id: users.id }).get();
      const row = tx
        .insert(apiKeys)
        .values({ userId: user.id, role, prefix: key.slice(0, SHOWN_CHARS), hash: hashKey(key) })
        .returning({ id: apiKeys.id })
        .get();
      return { key, id: row.id, userId: user.id };
    });
  }

  list(): KeyListing[] {
    return this.db
      .select({
        id: apiKeys.id,
        user: users.name,
        userId: users.id,
        role: apiKeys.role,
        prefix: apiKeys.prefix,
        createdAt: apiKeys.createdAt,
        lastUsedAt: apiKeys.lastUsedAt,
        revokedAt: apiKeys.revokedAt,
      })
      .from(apiKeys)
      .innerJoin(users, eq(users.id, apiKeys.userId))
      .orderBy(apiKeys.id)
      .all();
  }

  /** Returns false when no such key exists; revoking twice keeps the first time. */
  revoke(id: number): boolean {
    const key = this.db.select({ revokedAt: apiKeys.revokedAt }).from(apiKeys).where(eq(apiKeys.id, id)).get();
    if (!key) return false;
    if (key.revokedAt === null) {
      this.db.update(apiKeys).set({ revokedAt: Date.now() }).where(eq(apiKeys.id, id)).run();
    }
    return true;
  }

  /**
   * Looks the key up by its hash: the comparison happens inside an index lookup on a
   * digest, so response time does not depend on how much of a guessed key was right.
   */
  verify(key: string): Principal | undefined {
    const row = this.lookup.get({ hash: hashKey(key) });
    if (!row) return undefined;
    const { lastUsedAt, ...principal } = row;
    const now = Date.now();
    // Decided here rather than in the UPDATE's WHERE, so the common request runs no write at all.
    if (lastUsedAt === null || lastUsedAt < now - LAST_USED_RESOLUTION_MS) this.stamp.run({ id: row.keyId, now });
    return principal;
  }

  /**
   * First start: with no keys at all, create an admin user and key (the given one, or a random one).
   * Returns the key when one was created, so the caller can print it once.
   */
  bootstrap(adminKey?: string): string | undefined {
    const existing = this.db.select({ n: count() }).from(apiKeys).get();
    if ((existing?.n ?? 0) > 0) return undefined;
    return this.create("admin", "admin", adminKey).key;
  }
}
