import { afterAll, describe, expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { openStorage } from "../../src/db/open";
import type { UsageReport } from "../../src/http/contract";
import { allowSlowTests, serveApp, tempDir } from "../support";

allowSlowTests();

const dir = tempDir("cli");
const env = { ...Bun.env, PARLEY_DB: join(dir, "parley.db") };

function parley(...args: string[]) {
  const result = Bun.spawnSync(["bun", "src/cli.ts", ...args], { env, stdout: "pipe", stderr: "pipe" });
  return { code: result.exitCode, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
}

const storage = await openStorage(env.PARLEY_DB);
const server = serveApp({ storage });
afterAll(async () => {
  await server.stop();
  await storage.close();
});

const listAs = (key: string) => fetch(`${server.url}/api/v1.0/chat/messages`, { headers: { authorization: `Bearer ${key}` } });

describe("parley keys", () => {
  test("create → use → revoke → refused, and the database never holds the key", async () => {
    const created = parley("keys", "create", "--user", "carol");
    expect(created.code).toBe(0);
    const key = created.stdout.trim().split("\n").at(-1)!;
    expect(key).toMatch(/^pk_[A-Za-z0-9_-]{43}$/);
    expect((await listAs(key)).status).toBe(200);

    const listed = parley("keys", "list");
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain("carol");
    expect(listed.stdout).not.toContain(key);
    const id = listed.stdout
      .split("\n")
      .find((line) => line.includes("carol"))!
      .split("\t")[0]!;

    expect(parley("keys", "revoke", id).code).toBe(0);
    expect((await listAs(key)).status).toBe(401);
    expect(parley("keys", "list").stdout).toMatch(new RegExp(`^${id}\\t.*\\t\\d{4}-\\d\\d-\\d\\dT[^\\t]+Z$`, "m"));

    // Read by another process: closing a file of the database in this one would drop this
    // process's SQLite locks on it (POSIX locks are per process), and the next CLI command, seeing
    // no other connection, would remove the WAL from under this process's.
    const files = readdirSync(dir).map((file) => join(dir, file));
    const grep = Bun.spawnSync(["grep", "--fixed-strings", "--files-with-matches", "--binary-files=text", key.slice(3), ...files]);
    expect(grep.exitCode).toBe(1);
    expect(grep.stdout.toString()).toBe("");
  });

  test("--admin creates an admin key that reads any user", async () => {
    const key = parley("keys", "create", "--user", "dora", "--admin").stdout.trim().split("\n").at(-1)!;
    const response = await fetch(`${server.url}/api/v1.0/chat/messages?user_id=:eq:1`, { headers: { authorization: `Bearer ${key}` } });
    expect(response.status).toBe(200);
  });

  test("bad usage exits non-zero with a message, never a stack trace", () => {
    for (const args of [["keys", "create"], ["keys", "create", "--user", "no spaces"], ["keys", "revoke", "x"], ["keys", "frobnicate"], ["nope"]]) {
      const result = parley(...args);
      expect(result.code).toBe(2);
      expect(result.stderr).toMatch(/usage/i);
      expect(result.stderr).not.toContain("    at ");
    }
    expect(parley("keys", "revoke", "99999").code).toBe(1);
  });

  test("a bad config value stops with a message naming the variable", () => {
    const result = Bun.spawnSync(["bun", "src/cli.ts", "serve"], { env: { ...env, PARLEY_PORT: "eighty" }, stderr: "pipe" });
    expect(result.exitCode).toBe(2);
    expect(result.stderr.toString()).toContain("PARLEY_PORT");
  });
});

describe("parley quota", () => {
  test("set, list and clear a user's quota and the default; a user's standing shows as the API reads it", async () => {
    const key = parley("keys", "create", "--user", "quinn").stdout.trim().split("\n").at(-1)!;
    expect(parley("quota", "set", "--user", "quinn", "--tokens", "2000", "--period", "month").code).toBe(0);
    expect(parley("quota", "set", "--default", "--tokens", "50000", "--period", "day").code).toBe(0);
    const quinnId = (await storage.keys.list()).find((row) => row.user === "quinn")!.userId;
    await storage.usage.add(quinnId, new Date().toISOString().slice(0, 10), 30, 12);
    const listed = parley("quota", "list");
    expect(listed.code).toBe(0);
    const rows = listed.stdout
      .trim()
      .split("\n")
      .map((row) => row.split("\t"));
    expect(rows[0]).toEqual(["user", "limit", "period", "used", "remaining", "resets_at"]);
    expect(rows.slice(1).map((row) => row.slice(0, 5))).toEqual([
      ["(default)", "50000", "day", "-", "-"],
      ["quinn", "2000", "month", "42", "1958"],
    ]);
    const usage = (await (await fetch(`${server.url}/api/v1.0/usage`, { headers: { authorization: `Bearer ${key}` } })).json()) as UsageReport;
    expect(usage.quota).toMatchObject({ limit: 2000, period: "month", used: 42, remaining: 1958, resets_at: rows[2]![5] });

    expect(parley("quota", "clear", "--user", "quinn").code).toBe(0);
    const again = parley("quota", "clear", "--user", "quinn");
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("no quota of their own");
    expect(parley("quota", "clear", "--default").code).toBe(0);
    expect(parley("quota", "list").stdout.trim().split("\n")).toHaveLength(1);
  });

  test("bad usage exits 2 with the usage; an unknown user exits 1, naming them", () => {
    for (const args of [
      ["quota"],
      ["quota", "set", "--user", "quinn"],
      ["quota", "set", "--user", "quinn", "--default", "--tokens", "5", "--period", "day"],
      ["quota", "set", "--default", "--tokens", "-5", "--period", "day"],
      ["quota", "set", "--default", "--tokens", "5", "--period", "week"],
      ["quota", "clear"],
    ]) {
      const result = parley(...args);
      expect(result.code).toBe(2);
      expect(result.stderr).toContain("usage: parley quota");
    }
    const unknown = parley("quota", "set", "--user", "nobody", "--tokens", "5", "--period", "day");
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('no user "nobody"');
  });
});
