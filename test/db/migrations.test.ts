import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { openStorage } from "../../src/db/open";
import { BUSY_TIMEOUT_MS } from "../../src/db/sqlite/busy";
import { openSqliteStorage } from "../../src/db/sqlite/storage";
import { tempDir } from "../support";

describe("storage start-up", () => {
  test("a fresh database is created and migrated, with the pragmas durability needs", async () => {
    const path = join(tempDir("migrate"), "nested", "dir", "parley.db");
    const storage = openSqliteStorage(path);
    const pragma = (name: string) => Object.values(storage.sqlite.query(`PRAGMA ${name}`).get() as object)[0];
    expect(pragma("journal_mode")).toBe("wal");
    expect(pragma("foreign_keys")).toBe(1);
    expect(pragma("synchronous")).toBe(2); // FULL
    // SQLite waits for another process's lock only briefly, inside the call; the storage waits out
    // the rest between attempts, so the event loop never sleeps (src/db/sqlite/busy.ts).
    expect(pragma("busy_timeout")).toBe(BUSY_TIMEOUT_MS);
    expect(BUSY_TIMEOUT_MS).toBeLessThanOrEqual(10);
    const tables = storage.sqlite.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all();
    expect(tables.map((row) => (row as { name: string }).name)).toEqual(expect.arrayContaining(["api_keys", "conversations", "messages", "users"]));
    await storage.close();
  });

  test("an already-migrated database starts again and keeps its data", async () => {
    const path = join(tempDir("restart"), "parley.db");
    const first = await openStorage(path);
    const { key, userId } = await first.keys.create("erin", "user");
    const conversation = await first.conversations.findOrCreate(userId, "kept");
    await first.conversations.addMessage(conversation, { role: "user", content: "remember me" });
    await first.close();

    const second = openSqliteStorage(path);
    const migrations = second.sqlite.query("SELECT count(*) AS n FROM __drizzle_migrations").get() as { n: number };
    expect(migrations.n).toBeGreaterThan(0);
    expect((await second.keys.verify(key))?.userId).toBe(userId);
    const again = await second.conversations.findOrCreate(userId, "kept");
    expect(again.created).toBe(false);
    const content = second.sqlite.query("SELECT content FROM messages").all();
    expect(content).toEqual([{ content: "remember me" }]);
    await second.close();
  });

  test("foreign keys are enforced", async () => {
    await using storage = await openStorage(join(tempDir("fk"), "parley.db"));
    await expect(storage.conversations.addMessage({ id: 999, userId: 999, externalId: "x" }, { role: "user", content: "orphan" })).rejects.toThrow();
  });

  test("bootstrap creates one admin key on first start only, using PARLEY_ADMIN_KEY when given", async () => {
    await using storage = await openStorage(join(tempDir("boot"), "parley.db"));
    const { keys } = storage;
    const chosen = "automation-chosen-admin-key-0123456789";
    expect(await keys.bootstrap(chosen)).toBe(chosen);
    expect(await keys.verify(chosen)).toMatchObject({ role: "admin", userName: "admin" });
    expect(await keys.bootstrap()).toBeUndefined();
    expect(await keys.list()).toHaveLength(1);
  });
});
