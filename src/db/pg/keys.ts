import { and, count, eq, isNull, sql } from "drizzle-orm";
import { generateKey, hashKey, isLastUsedStale, shownPrefix } from "../api-keys";
import type { KeyStore } from "../storage";
import type { CreatedKey, KeyListing, KeyRole, Principal } from "../types";
import type { Db, Tx } from "./client";
import { apiKeys, NOW_MS, users } from "./schema";

/** Any constant: serializes first starts, so two nodes starting at once create one admin key. */
const BOOTSTRAP_LOCK = 0x70617232; // "par2"

async function createKey(tx: Db | Tx, userName: string, role: KeyRole, key: string): Promise<CreatedKey> {
  // One statement whether or not the user exists, safe against another node doing the same.
  const [user] = await tx
    .insert(users)
    .values({ name: userName })
    .onConflictDoUpdate({ target: users.name, set: { name: sql`excluded.name` } })
    .returning({ id: users.id });
  const [row] = await tx
    .insert(apiKeys)
    .values({ userId: user!.id, role, prefix: shownPrefix(key), hash: hashKey(key) })
    .returning({ id: apiKeys.id });
  return { key, id: row!.id, userId: user!.id };
}

/**
 * Keys in PostgreSQL. `verify` reads the database on every request, so a key revoked through any
 * node (or `parley keys revoke`) is refused by every node from its next request on.
 */
export class PgKeyStore implements KeyStore {
  private readonly lookup;
  private readonly stamp;

  constructor(private readonly db: Db) {
    this.lookup = db
      .select({ keyId: apiKeys.id, userId: users.id, userName: users.name, role: apiKeys.role, lastUsedAt: apiKeys.lastUsedAt })
      .from(apiKeys)
      .innerJoin(users, eq(users.id, apiKeys.userId))
      .where(and(eq(apiKeys.hash, sql.placeholder("hash")), isNull(apiKeys.revokedAt)))
      .prepare("parley_key_lookup");
    this.stamp = db
      .update(apiKeys)
      .set({ lastUsedAt: sql`${sql.placeholder("now")}` })
      .where(eq(apiKeys.id, sql.placeholder("id")))
      .prepare("parley_key_stamp");
  }

  create(userName: string, role: KeyRole, key: string = generateKey()): Promise<CreatedKey> {
    return createKey(this.db, userName, role, key);
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
      .orderBy(apiKeys.id);
  }

  async revoke(id: number): Promise<boolean> {
    const rows = await this.db
      .update(apiKeys)
      .set({ revokedAt: sql`coalesce(${apiKeys.revokedAt}, ${NOW_MS})` })
      .where(eq(apiKeys.id, id))
      .returning({ id: apiKeys.id });
    return rows.length > 0;
  }

  /** The comparison happens inside an index lookup on a digest, never on the key itself. */
  async verify(key: string): Promise<Principal | undefined> {
    const [row] = await this.lookup.execute({ hash: hashKey(key) });
    if (!row) return undefined;
    const { lastUsedAt, ...principal } = row;
    const now = Date.now();
    // Decided here rather than in the UPDATE's WHERE, so the common request runs no write at all.
    if (isLastUsedStale(lastUsedAt, now)) await this.stamp.execute({ id: row.keyId, now });
    return principal;
  }

  async bootstrap(adminKey?: string): Promise<string | undefined> {
    return this.db.transaction(async (tx) => {
      await tx.execute(sql`SELECT pg_advisory_xact_lock(${BOOTSTRAP_LOCK})`);
      const [existing] = await tx.select({ n: count() }).from(apiKeys);
      if ((existing?.n ?? 0) > 0) return undefined;
      return (await createKey(tx, "admin", "admin", adminKey ?? generateKey())).key;
    });
  }
}
