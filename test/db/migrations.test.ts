import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { openStorage } from "../../src/db/client";
import { ensureConversation, insertMessage } from "../../src/db/conversations";
import { KeyStore } from "../../src/db/keys";
import { tempDir } from "../support";

describe("storage start-up", () => {
  test("a fresh database is created and migrated, with the pragmas durability needs", () => {
    const path = join(tempDir("migrate"), "nested", "dir", "parley.db");
    const storage = openStorage(path);
    const pragma = (name: string) => Object.values(storage.sqlite.query(`PRAGMA ${name}`).get() as object)[0];
    expect(pragma("journal_mode")).toBe("wal");
    expect(pragma("foreign_keys")).toBe(1);
    expect(pragma("synchronous")).toBe(2); // FULL
    expect(pragma("busy_timeout")).toBe(5000);
    const tables = storage.sqlite.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all();
    expect(tables.map((row) => (row as { name: string }).name)).toEqual(
      expect.arrayContaining(["api_keys", "conversations", "messages", "users"]),
    );
    storage.close();
  });

  test("an already-migrated database starts again and keeps its data", () => {
    const path = join(tempDir("restart"), "parley.db");
    const first = openStorage(path);
    const keys = new KeyStore(first.db);
    const { key, userId } = keys.create("erin", "user");
    const conversation = ensureConversation(first.db, userId, "kept");
    insertMessage(first.db, conversation, { role: "user", content: "remember me" });
    first.close();

    const second = openStorage(path);
    const migrations = second.sqlite.query("SELECT count(*) AS n FROM __drizzle_migrations").get() as { n: number };
    expect(migrations.n).toBeGreaterThan(0);
    expect(new KeyStore(second.db).verify(key)?.userId).toBe(userId);
    const again = ensureConversation(second.db, userId, "kept");
    expect(again.created).toBe(false);
    const content = second.sqlite.query("SELECT content FROM messages").all();
    expect(content).toEqual([{ content: "remember me" }]);
    second.close();
  });

  test("foreign keys are enforced", () => {
    const storage = openStorage(join(tempDir("fk"), "parley.db"));
    expect(() => insertMessage(storage.db, { id: 999, userId: 999, externalId: "x" }, { role: "user", content: "orphan" })).toThrow();
    storage.close();
  });

  test("bootstrap creates one admin key on first start only, using PARLEY_ADMIN_KEY when given", () => {
    const storage = openStorage(join(tempDir("boot"), "parley.db"));
    const keys = new KeyStore(storage.db);
    const chosen = "automation-chosen-admin-key-0123456789";
    expect(keys.bootstrap(chosen)).toBe(chosen);
    expect(keys.verify(chosen)).toMatchObject({ role: "admin", userName: "admin" });
    expect(keys.bootstrap()).toBeUndefined();
    expect(keys.list()).toHaveLength(1);
    storage.close();
  });
});
