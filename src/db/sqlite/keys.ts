import { and, count, eq, isNull, sql } from "drizzle-orm";
import { generateKey, hashKey, isLastUsedStale, shownPrefix } from "../api-keys";
import type { KeyStore } from "../storage";
import type { CreatedKey, KeyListing, KeyRole, Principal } from "../types";
import type { Db } from "./client";
import { apiKeys, users } from "./schema";

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

export class SqliteKeyStore implements KeyStore {
  private readonly lookup;
  private readonly stamp;

  constructor(private readonly db: Db) {
    ({ lookup: this.lookup, stamp: this.stamp } = verifyStatements(db));
  }

  async create(userName: string, role: KeyRole, key: string = generateKey()): Promise<CreatedKey> {
    return this.db.transaction((tx) => {
      const user =
        tx.select({ id: users.id }).from(users).where(eq(users.name, userName)).get() ??
        tx.insert(users).values({ name: userName }).returning({ id: users.id }).get();
      const row = tx
        .insert(apiKeys)
        .values({ userId: user.id, role, prefix: shownPrefix(key), hash: hashKey(key) })
        .returning({ id: apiKeys.id })
        .get();
      return { key, id: row.id, userId: user.id };
    });
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
    const key = this.db.select({ revokedAt: apiKeys.revokedAt }).from(apiKeys).where(eq(apiKeys.id, id)).get();
    if (!key) return false;
    if (key.revokedAt === null) {
      this.db.update(apiKeys).set({ revokedAt: Date.now() }).where(eq(apiKeys.id, id)).run();
    }
    return true;
  }

  /** The comparison happens inside an index lookup on a digest, never on the key itself. */
  async verify(key: string): Promise<Principal | undefined> {
    const row = this.lookup.get({ hash: hashKey(key) });
    if (!row) return undefined;
    const { lastUsedAt, ...principal } = row;
    const now = Date.now();
    // Decided here rather than in the UPDATE's WHERE, so the common request runs no write at all.
    if (isLastUsedStale(lastUsedAt, now)) this.stamp.run({ id: row.keyId, now });
    return principal;
  }

  async bootstrap(adminKey?: string): Promise<string | undefined> {
    const existing = this.db.select({ n: count() }).from(apiKeys).get();
    if ((existing?.n ?? 0) > 0) return undefined;
    return (await this.create("admin", "admin", adminKey)).key;
  }
}
