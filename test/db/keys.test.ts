import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { readMigrationFiles } from "drizzle-orm/migrator";
import { hashKey } from "../../src/db/api-keys";
import { allowSlowTests, holdWriteLock, testDb } from "../support";

allowSlowTests();

describe("key store", () => {
  test("a generated key is listed by its prefix and 6 random characters; an operator's key only by a fingerprint", async () => {
    const { keys, storage } = testDb("shown");
    const generated = await keys.create("gus", "user");
    const chosen = "automation-chosen-admin-key-0123456789";
    await keys.create("admin", "admin", chosen);
    const [first, second] = await keys.list();
    expect(first!.prefix).toBe(generated.key.slice(0, 9));
    expect(second!.prefix).toBe(`sha256:${hashKey(chosen).slice(0, 8)}`);
    expect(second!.prefix).not.toContain(chosen.slice(0, 3));
    await storage.close();
  });

  test("migration 0003 shows keys stored with the old prefix of an operator's key by their fingerprint", async () => {
    const { keys, storage } = testDb("fingerprints");
    const chosen = "automation-chosen-admin-key-0123456789";
    const generated = await keys.create("gus", "user");
    await keys.create("admin", "admin", chosen);
    // As a database written before 0003 holds it, then 0003 run on it.
    storage.sqlite.run("UPDATE api_keys SET prefix = ? WHERE role = 'admin'", [chosen.slice(0, 9)]);
    const fingerprints = readMigrationFiles({ migrationsFolder: join(import.meta.dir, "../../src/db/sqlite/migrations") })[3]!;
    for (const statement of fingerprints.sql) storage.sqlite.run(statement);
    expect((await keys.list()).map((row) => row.prefix)).toEqual([generated.key.slice(0, 9), `sha256:${hashKey(chosen).slice(0, 8)}`]);
    await storage.close();
  });

  test("revoking: false for an unknown key, and revoking twice keeps the first time", async () => {
    const { keys, storage } = testDb("revoke");
    const { id } = await keys.create("hal", "user");
    expect(await keys.revoke(id + 1)).toBe(false);
    expect(await keys.revoke(id)).toBe(true);
    const first = (await keys.list())[0]!.revokedAt;
    expect(first).not.toBeNull();
    await Bun.sleep(2); // so a second stamp would differ
    expect(await keys.revoke(id)).toBe(true);
    expect((await keys.list())[0]!.revokedAt).toBe(first);
    await storage.close();
  });

  test("bootstrap counts the keys under the write lock: a key committed by another process meanwhile is counted", async () => {
    const { path, storage } = testDb("bootstrap-lock");
    // Another process is creating the first key right now (as a second first start would).
    const holder = await holdWriteLock(
      path,
      "INSERT INTO users (name) VALUES ('other'); INSERT INTO api_keys (user_id, role, prefix, hash) VALUES (last_insert_rowid(), 'admin', 'x', 'y')",
    );
    const bootstrapped = storage.keys.bootstrap();
    expect(await holder.release()).toBe(0);
    expect(await bootstrapped).toBeUndefined();
    expect(await storage.keys.list()).toHaveLength(1);
    await storage.close();
  });
});
