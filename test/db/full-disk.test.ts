/**
 * A full disk beside the database: closing still closes it, and `parley serve` still stops with 0.
 * Needs a small tmpfs: mounting one changes the machine, so it runs only with PARLEY_SYSTEM_TESTS=1
 * (system-tests.ts), as root.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { closeSync, openSync, writeSync } from "node:fs";
import { join } from "node:path";
import { openSqliteStorage } from "../../src/db/sqlite/storage";
import { allowSlowTests, postChat, startServer, systemTests, tempDir } from "../support";

allowSlowTests();

const mounted: string[] = [];
afterAll(() => {
  for (const dir of mounted) Bun.spawnSync(["umount", "-l", dir]);
});

const skipped = systemTests("the full-disk tests", () => (process.getuid?.() !== 0 ? "mounting a tmpfs needs root" : undefined));

/** A fresh 4 MB tmpfs for one test. */
function freshDisk(): string {
  const dir = tempDir("full-disk");
  const mount = Bun.spawnSync(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir], { stderr: "pipe" });
  if (mount.exitCode !== 0) throw new Error(`mount -t tmpfs failed: ${mount.stderr.toString().trim()}`);
  mounted.push(dir);
  return dir;
}

/** Writes a file in `dir` until the disk refuses another byte. */
function fill(dir: string): void {
  const fd = openSync(join(dir, "filler"), "w");
  const chunk = Buffer.alloc(16_384);
  try {
    for (;;) writeSync(fd, chunk);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOSPC") throw error;
  } finally {
    closeSync(fd);
  }
}

describe.skipIf(skipped !== undefined)("a full disk", () => {
  test("closing the storage closes the database although PRAGMA optimize fails with SQLITE_FULL", async () => {
    const dir = freshDisk();
    const storage = openSqliteStorage(join(dir, "parley.db"));
    const { userId } = await storage.keys.create("fay", "user");
    const conversation = await storage.conversations.findOrCreate(userId, "c");
    await storage.conversations.addMessage(conversation, { role: "user", content: "kept" });
    fill(dir);
    await expect(storage.conversations.addMessage(conversation, { role: "user", content: "x".repeat(100_000) })).rejects.toMatchObject({ code: "SQLITE_FULL" });

    await storage.close();
    expect(() => storage.sqlite.query("SELECT 1").get()).toThrow(/closed/i);
  });

  test("parley serve stops gracefully on a full disk: exit code 0, no stack trace", async () => {
    const adminKey = "full-disk-admin-key-0123456789abcdef";
    const dir = freshDisk();
    const dbPath = join(dir, "parley.db");
    // The KV states go elsewhere: this is about the database.
    const server = await startServer({ dbPath, adminKey, env: { PARLEY_DATA_DIR: tempDir("full-disk-data") } });
    try {
      const response = await postChat(server.url, adminKey, { message: "Hi", conversation_id: "c", max_tokens: 4 });
      expect(response.status).toBe(200);
      fill(dir);
      expect(await server.stop()).toBe(0);
      expect(server.lines.join("\n")).not.toContain("    at ");
    } finally {
      server.child.kill("SIGKILL");
    }
  });
});
