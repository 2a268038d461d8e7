/**
 * Processes sharing one SQLite file: `parley keys` beside a serving `parley serve` under chat
 * traffic, and a second `parley serve` on the same file.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { allowSlowTests, type ChildServer, postChat, presetModel, startServer, tempDir, until } from "../support";

allowSlowTests();

const ROOT = join(import.meta.dir, "../..");
const adminKey = "writers-test-admin-key-0123456789abcdef";
const started: ChildServer[] = [];
afterAll(() => {
  for (const server of started) server.child.kill("SIGKILL");
});

async function serve(dbPath: string): Promise<ChildServer> {
  const server = await startServer({ dbPath, adminKey, env: { PARLEY_RATE_LIMIT: "0" } });
  started.push(server);
  return server;
}

async function parley(dbPath: string, ...args: string[]) {
  const child = Bun.spawn(["bun", "src/cli.ts", ...args], { cwd: ROOT, env: { ...Bun.env, PARLEY_DB: dbPath }, stdout: "pipe", stderr: "pipe" });
  const [code, stdout, stderr] = await Promise.all([child.exited, new Response(child.stdout).text(), new Response(child.stderr).text()]);
  return { code, stdout, stderr };
}

/** Chats on fresh conversations (each one a find-or-create and two inserts) until `stop` holds. */
async function traffic(url: string, stop: () => boolean, statuses: number[], lane: number) {
  for (let turn = 0; !stop(); turn++) {
    const response = await postChat(url, adminKey, { message: "Hi", conversation_id: `lane${lane}-${turn}`, max_tokens: 2 });
    await response.arrayBuffer();
    statuses.push(response.status);
  }
}

describe("one SQLite file, several processes", () => {
  test("`parley keys create` beside a server under chat traffic: every key is created, no chat fails", async () => {
    const dbPath = join(tempDir("writers"), "parley.db");
    const server = await serve(dbPath);
    const statuses: number[] = [];
    let done = false;
    const lanes = [0, 1, 2].map((lane) => traffic(server.url, () => done, statuses, lane));
    await until(() => statuses.length > 0, "the first chat");

    const runs: Awaited<ReturnType<typeof parley>>[] = [];
    // Two at a time, so key creations also meet each other.
    for (let i = 0; i < 24; i += 2) {
      runs.push(...(await Promise.all([parley(dbPath, "keys", "create", "--user", `u${i}`), parley(dbPath, "keys", "create", "--user", `u${i + 1}`)])));
    }
    done = true;
    await Promise.all(lanes);

    const failed = runs.filter((run) => run.code !== 0);
    expect(failed.map((run) => run.stderr.split("\n").find((line) => line.includes("Error")) ?? run.stderr)).toEqual([]);
    expect(statuses.length).toBeGreaterThan(10);
    expect(statuses.filter((status) => status !== 200)).toEqual([]);
  });

  test("a second `parley serve` on the same database is refused with one line naming the first; after a SIGKILL of the first, a server starts", async () => {
    const dbPath = join(tempDir("two-servers"), "parley.db");
    const first = await serve(dbPath);
    const second = Bun.spawn(["bun", "src/cli.ts", "serve"], {
      cwd: ROOT,
      env: { ...Bun.env, PARLEY_DB: dbPath, PARLEY_PORT: "0", PARLEY_MODEL: await presetModel("demo"), PARLEY_MODELS_DIR: tempDir("no-models") },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [code, stdout, stderr] = await Promise.all([second.exited, new Response(second.stdout).text(), new Response(second.stderr).text()]);
    expect(code).toBe(1);
    expect(stdout).toBe("");
    expect(stderr.trim().split("\n")).toEqual([`parley: another parley serve (pid ${first.pid}) is serving ${dbPath}`]);
    // The CLI does not take the server's lock.
    expect((await parley(dbPath, "keys", "list")).code).toBe(0);

    first.child.kill("SIGKILL");
    await first.child.exited;
    const third = await serve(dbPath);
    expect((await postChat(third.url, adminKey, { message: "Hi", conversation_id: "after", max_tokens: 2 })).status).toBe(200);
    expect(await third.stop()).toBe(0);
  });

  test("processes opening a new database at once all start: the migrations are applied once", async () => {
    const dbPath = join(tempDir("first-open"), "parley.db");
    const runs = await Promise.all(["a", "b", "c", "d"].map((user) => parley(dbPath, "keys", "create", "--user", user)));
    expect(runs.map((run) => run.stderr)).toEqual(["", "", "", ""]);
    expect((await parley(dbPath, "keys", "list")).stdout.trim().split("\n")).toHaveLength(5);
  });
});
