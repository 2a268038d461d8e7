import { afterAll, describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { openStorage } from "../../src/db/open";
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
    const id = listed.stdout.split("\n").find((line) => line.includes("carol"))!.split("\t")[0]!;

    expect(parley("keys", "revoke", id).code).toBe(0);
    expect((await listAs(key)).status).toBe(401);
    expect(parley("keys", "list").stdout).toMatch(new RegExp(`^${id}\\t.*\\t\\d{4}-\\d\\d-\\d\\dT[^\\t]+Z$`, "m"));

    for (const file of readdirSync(dir)) {
      expect(readFileSync(join(dir, file)).includes(Buffer.from(key.slice(3)))).toBe(false);
    }
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
