import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { hashKey } from "../../src/db/api-keys";
import { allowSlowTests, type ChildServer, startServer, tempDir } from "../support";

allowSlowTests();

const ROOT = join(import.meta.dir, "../..");
const started: ChildServer[] = [];
afterAll(() => {
  for (const server of started) server.child.kill("SIGKILL");
});

/** Starts and stops `parley serve` with this PARLEY_ADMIN_KEY; returns what it printed. */
async function serveOnce(dbPath: string, adminKey: string): Promise<string[]> {
  const server = await startServer({ dbPath, adminKey });
  started.push(server);
  expect(await server.stop()).toBe(0);
  return server.lines;
}

describe("PARLEY_ADMIN_KEY", () => {
  test("is listed by a fingerprint, and a changed one on a later start is warned about, never echoed", async () => {
    const dbPath = join(tempDir("admin-key"), "parley.db");
    const chosen = "operator-chosen-admin-key-0123456789";
    await serveOnce(dbPath, chosen);

    const listed = Bun.spawnSync(["bun", "src/cli.ts", "keys", "list"], { cwd: ROOT, env: { ...Bun.env, PARLEY_DB: dbPath } }).stdout.toString();
    const admin = listed.split("\n").find((line) => line.includes("\tadmin\t"))!;
    expect(admin.split("\t")[4]).toBe(`sha256:${hashKey(chosen).slice(0, 8)}…`);
    expect(listed).not.toContain(chosen.slice(0, 4));

    const changed = "operator-changed-admin-key-9876543210";
    const warned = (await serveOnce(dbPath, changed)).filter((line) => line.includes("PARLEY_ADMIN_KEY is ignored"));
    expect(warned).toHaveLength(1);
    expect(JSON.parse(warned[0]!).level).toBe("warn");
    expect(warned[0]).not.toContain(changed.slice(0, 4));

    expect((await serveOnce(dbPath, chosen)).filter((line) => line.includes("PARLEY_ADMIN_KEY"))).toEqual([]);
  });
});
