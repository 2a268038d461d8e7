import { and, count, eq, isNull, sql } from "drizzle-orm";
import { generateKey, hashKey, isLastUsedStale, shownPrefix } from "../api-keys";
import type { KeyStore } from "../storage";
import type { CreatedKey, KeyListing, KeyRole, Principal } from "../types";
import { isBusy } from "./busy";
import type { Db, Tx } from "./client";
import { RawSelect } from "./raw-select";
import { apiKeys, users } from "./schema";

/** A key's row as `verify` reads it: the principal, and when the key was last recorded in use. */
type KeyRow = Principal & { lastUsedAt: number | null };

/** Column order of the lookup's select. */
const toKeyRow = (values: unknown[]): KeyRow => ({
  keyId: values[0] as number,
  userId: values[1] as number,
  userName: values[2] as string,
  role: values[3] as KeyRole,
  lastUsedAt: values[4] as number | null,
});

/**
 * Every authenticated request runs these: prepared once, not rebuilt per request. The lookup is
 * read straight from the driver (`RawSelect`), like the listing: it is on every request's path.
 */
function verifyStatements(db: Db) {
  return {
    lookup: new RawSelect(
      db,
      db
        .select({ keyId: apiKeys.id, userId: users.id, userName: users.name, role: apiKeys.role, lastUsedAt: apiKeys.lastUsedAt })
        .from(apiKeys)
        .innerJoin(users, eq(users.id, apiKeys.userId))
        .where(and(eq(apiKeys.hash, sql.placeholder("hash")), isNull(apiKeys.revokedAt))),
      toKeyRow,
    ),
    stamp: db
      .update(apiKeys)
      .set({ lastUsedAt: sql`${sql.placeholder("now")}` })
      .where(eq(apiKeys.id, sql.placeholder("id")))
      .prepare(),
  };
}

export class SqliteKeyStore implements KeyStore {
  private readonly lookup;
  private readonly stamp;

  constructor(private readonly db: Db) {
    ({ lookup: this.lookup, stamp: this.stamp } = verifyStatements(db));
  }

  async create(userName: string, role: KeyRole, key: string = generateKey()): Promise<CreatedKey> {
    // Immediate: a deferred transaction that reads, then writes, cannot wait for another process's
    // write lock (SQLITE_BUSY_SNAPSHOT); one that takes the lock first can.
    return this.db.transaction((tx) => insertKey(tx, userName, role, key), { behavior: "immediate" });
  }

  async list(): Promise<KeyListing[]> {
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

  async revoke(id: number): Promise<boolean> {
    // One statement: the first revocation's time is kept without a read before the write.
    const revoked = this.db
      .update(apiKeys)
      .set({ revokedAt: sql`coalesce(${apiKeys.revokedAt}, ${Date.now()})` })
      .where(eq(apiKeys.id, id))
      .returning({ id: apiKeys.id })
      .all();
    return revoked.length > 0;
  }

  /** The comparison happens inside an index lookup on a digest, never on the key itself. */
  async verify(key: string): Promise<Principal | undefined> {
    const row = this.lookup.get({ hash: hashKey(key) });
    if (!row) return undefined;
    const { lastUsedAt, ...principal } = row;
    const now = Date.now();
    // Decided here rather than in the UPDATE's WHERE, so the common request runs no write at all.
    if (isLastUsedStale(lastUsedAt, now)) this.stampIfFree(row.keyId, now);
    return principal;
  }

  /** Counting and creating are one immediate transaction: two first starts cannot both create an admin key. */
  async bootstrap(adminKey?: string): Promise<string | undefined> {
    return this.db.transaction(
      (tx) => {
        const existing = tx.select({ n: count() }).from(apiKeys).get();
        if ((existing?.n ?? 0) > 0) return undefined;
        return insertKey(tx, "admin", "admin", adminKey ?? generateKey()).key;
      },
      { behavior: "immediate" },
    );
  }

  /**
   * Recording a use is worth no wait and no failed request: while another process holds the write
   * lock it is skipped, and the key's next request (still stale) records it.
   */
  private stampIfFree(id: number, now: number): void {
    try {
      this.stamp.run({ id, now });
    } catch (error) {
      if (!isBusy(error)) throw error;
    }
  }
}

/** The user (created if new) and its key, inside the caller's transaction. */
function insertKey(tx: Tx, userName: string, role: KeyRole, key: string): CreatedKey {
  const user =
    tx.select({ id: users.id }).from(users).where(eq(users.name, userName)).get() ??
    tx.insert(users).values({ name: userName }).returning({ id: users.id }).get();
  const row = tx
    .insert(apiKeys)
    .values({ userId: user.id, role, prefix: shownPrefix(key), hash: hashKey(key) })
    .returning({ id: apiKeys.id })
    .get();
  return { key, id: row.id, userId: user.id };
}
