/**
 * Another process holds the database's write lock while `parley serve` answers: the server keeps
 * answering everything else at once, and a chat or a `parley keys` waits for the lock (bounded) or is
 * refused cleanly (503; one line and exit 1), never a 500 or a stack trace.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { openSqliteStorage } from "../../src/db/sqlite/storage";
import { allowSlowTests, type ChildServer, holdWriteLock, postChat, presetModel, startServer, tempDir, until } from "../support";

allowSlowTests();

const ROOT = join(import.meta.dir, "../..");
const adminKey = "busy-test-admin-key-0123456789abcdef";
const started: ChildServer[] = [];
afterAll(() => {
  for (const server of started) server.child.kill("SIGKILL");
});

async function parley(dbPath: string, ...args: string[]) {
  const child = Bun.spawn(["bun", "src/cli.ts", ...args], { cwd: ROOT, env: { ...Bun.env, PARLEY_DB: dbPath }, stdout: "pipe", stderr: "pipe" });
  const [code, stdout, stderr] = await Promise.all([child.exited, new Response(child.stdout).text(), new Response(child.stderr).text()]);
  return { code, stdout, stderr };
}

describe("a database locked by another process", () => {
  test("/healthz stays fast; a chat waits for the lock or gets a 503, never a 500; `parley keys` waits or says so in one line", async () => {
    const dbPath = join(tempDir("busy"), "parley.db");
    const server = await startServer({ dbPath, adminKey, env: { PARLEY_RATE_LIMIT: "0" } });
    started.push(server);
    const chat = (conversation_id: string) => postChat(server.url, adminKey, { message: "Hi", conversation_id, max_tokens: 2 });

    let worstMs = 0;
    let polling = true;
    let polls = 0;
    const health = (async () => {
      while (polling) {
        const asked = performance.now();
        expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
        worstMs = Math.max(worstMs, performance.now() - asked);
        polls++;
        await Bun.sleep(20);
      }
    })();

    const holder = await holdWriteLock(dbPath);
    // Held for longer than the storage waits (5 s): these are refused.
    const [early, earlyKey] = await Promise.all([chat("early"), parley(dbPath, "keys", "create", "--user", "early")]);
    expect(early.status).toBe(503);
    expect(early.headers.get("retry-after")).not.toBeNull();
    expect(((await early.json()) as { error: { code: string } }).error.code).toBe("overloaded");
    expect(earlyKey).toEqual({ code: 1, stdout: "", stderr: "parley: the database is busy: another process holds its write lock; try again shortly\n" });

    // These wait for the lock, released soon after they are sent.
    const late = chat("late");
    const lateKey = parley(dbPath, "keys", "create", "--user", "late");
    const sent = polls;
    await until(() => polls >= sent + 10, "the late requests to meet the lock");
    expect(await holder.release()).toBe(0);
    expect((await lateKey).code).toBe(0);
    const reply = await late;
    expect(reply.status).toBe(200);
    expect(((await reply.json()) as { message: { role: string } }).message.role).toBe("assistant");

    polling = false;
    await health;
    console.log(`/healthz worst delay while another process held the write lock: ${worstMs.toFixed(1)} ms (${polls} polls)`);
    expect(worstMs).toBeLessThan(500);
  });

  test("`parley serve` starting while another process keeps the lock for longer than it waits: one line, exit 1", async () => {
    const dbPath = join(tempDir("busy-start"), "parley.db");
    await openSqliteStorage(dbPath).close();
    const holder = await holdWriteLock(dbPath);
    const child = Bun.spawn(["bun", "src/cli.ts", "serve"], {
      cwd: ROOT,
      env: { ...Bun.env, PARLEY_DB: dbPath, PARLEY_PORT: "0", PARLEY_MODEL: await presetModel("demo"), PARLEY_MODELS_DIR: tempDir("no-models") },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [code, stderr] = await Promise.all([child.exited, new Response(child.stderr).text()]);
    expect(code).toBe(1);
    expect(stderr).toBe("parley: cannot start: the database is busy: another process holds its write lock; try again shortly\n");
    await holder.release();
  });
});
