import { Database } from "bun:sqlite";
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { BURST_MS } from "../../src/stop-signals";
import { allowSlowTests, bearer, type ChildServer, postChat, rawRequest, readSse, startServer, tempDir, until } from "../support";

allowSlowTests();

const adminKey = "shutdown-test-admin-key-0123456789abcdef";
const started: ChildServer[] = [];
afterAll(() => {
  for (const server of started) server.child.kill("SIGKILL");
});

type Server = ChildServer & { dbPath: string };

/** `parley serve` on the bench model (it never ends a reply by itself), ready to chat. */
async function start(env: Record<string, string> = {}): Promise<Server> {
  const dbPath = join(tempDir("shutdown"), "parley.db");
  const server = await startServer({ dbPath, adminKey, preset: "bench-small", env: { PARLEY_CONTEXT_SIZE: "512", ...env } });
  started.push(server);
  return { ...server, dbPath };
}

async function openStream(server: Server, conversationId: string) {
  const response = await postChat(server.url, adminKey, { message: "Go on forever", conversation_id: conversationId, stream: true, max_tokens: 4096 });
  expect(response.status).toBe(200);
  const events = readSse(response);
  // Not `for await … break`: that would cancel the body, which is a disconnect.
  for (let step = await events.next(); !step.done && step.value.event !== "delta"; step = await events.next());
  return events;
}

const replies = (dbPath: string) => {
  const db = new Database(dbPath, { readonly: true });
  try {
    return db.query("SELECT role, finish_reason, length(content) AS length FROM messages ORDER BY id").all() as {
      role: string;
      finish_reason: string | null;
      length: number;
    }[];
  } finally {
    db.close();
  }
};

describe("shutdown", () => {
  test("SIGTERM during a stream: the reply ends as cancelled after the grace period, is stored, and the exit code is 0", async () => {
    const server = await start({ PARLEY_SHUTDOWN_GRACE_S: "1" });
    const events = await openStream(server, "interrupted");
    const signalledAt = performance.now();
    server.child.kill("SIGTERM");

    let done: { message: { finish_reason: string; content: string } } | undefined;
    for await (const event of events) if (event.event === "done") done = event.data as typeof done;
    expect(done?.message.finish_reason).toBe("cancelled");
    expect(await server.child.exited).toBe(0);
    // It waited for the grace period, then stopped promptly.
    const seconds = (performance.now() - signalledAt) / 1000;
    expect(seconds).toBeGreaterThan(0.9);

    const rows = replies(server.dbPath);
    expect(rows.map((row) => [row.role, row.finish_reason])).toEqual([
      ["user", null],
      ["assistant", "cancelled"],
    ]);
    expect(rows[1]!.length).toBe(done!.message.content.length);
    expect(server.lines.some((line) => line.includes('"msg":"shutting down"'))).toBe(true);
    expect(server.lines.some((line) => line.includes('"msg":"stopped"'))).toBe(true);
  });

  test("SIGTERM with requests waiting: each ends in a complete answer, and every stored question has its reply", async () => {
    const server = await start({ PARLEY_SHUTDOWN_GRACE_S: "1", PARLEY_PARALLEL: "1" });
    const busy = await openStream(server, "busy");
    const finishing = (async () => {
      for await (const event of busy) if (event.event === "done") return (event.data as { message: { finish_reason: string } }).message.finish_reason;
    })();
    const ask = (conversation: string, stream: boolean) =>
      postChat(server.url, adminKey, { message: "Waiting", conversation_id: conversation, stream, max_tokens: 8 });
    // Two wait for the busy conversation's turn, two for the one sequence.
    const waiting = {
      lockPlain: ask("busy", false),
      lockStream: ask("busy", true),
      queuedPlain: ask("queued-plain", false),
      queuedStream: ask("queued-stream", true),
    };
    const turns = async () =>
      Number(/^parley_chat_turns (\d+)$/m.exec(await (await fetch(`${server.url}/metrics`, { headers: bearer(adminKey) })).text())?.[1]);
    await until(async () => (await turns()) === 5, "all five turns to be admitted");
    server.child.kill("SIGTERM");

    expect(await finishing).toBe("cancelled");
    // Still waiting for the conversation when cancelled: nothing of theirs was stored, so a 503.
    for (const response of [await waiting.lockPlain, await waiting.lockStream]) {
      expect(response.status).toBe(503);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe("overloaded");
    }
    // Their questions were stored: each gets a reply, empty and cancelled.
    const plain = await waiting.queuedPlain;
    expect(plain.status).toBe(200);
    expect(((await plain.json()) as { message: unknown }).message).toMatchObject({ content: "", finish_reason: "cancelled" });
    const events = [];
    for await (const event of readSse(await waiting.queuedStream)) events.push(event);
    expect(events.map((event) => event.event)).toEqual(["start", "done"]);
    expect((events[1]!.data as { message: unknown }).message).toMatchObject({ content: "", finish_reason: "cancelled" });
    expect(await server.child.exited).toBe(0);

    const rows = replies(server.dbPath);
    expect(rows.filter((row) => row.role === "user").length).toBe(3);
    expect(rows.filter((row) => row.role === "assistant" && row.finish_reason === "cancelled").length).toBe(3);
  });

  test("requests the server cannot take (an invalid Host) get a 400 and leave a graceful stop at exit 0", async () => {
    const server = await start();
    for (const host of ["a b", "", "user@host", "[::1", "[::1]x", "[zz::1]", "localhost:99999", "localhost:"]) {
      const response = await rawRequest(server.url, `GET /healthz HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
      expect(response?.status).toBe(400);
      expect(JSON.parse(response!.body)).toMatchObject({ error: { code: "bad_request" } });
    }
    server.child.kill("SIGTERM");
    expect(await server.child.exited).toBe(0);
  });

  test("a second signal exits at once and the database stays whole", async () => {
    const server = await start({ PARLEY_SHUTDOWN_GRACE_S: "60" });
    const events = await openStream(server, "held");
    // Keep reading: an abandoned body may be collected, and that is a disconnect.
    let deltas = 0;
    const reading = (async () => {
      for await (const event of events) if (event.event === "delta") deltas++;
    })().catch(() => undefined);
    server.child.kill("SIGTERM");
    // A signal within BURST_MS of the first is the same stop (one Ctrl-C reaches a process twice).
    const secondAfter = performance.now() + 2 * BURST_MS;
    await until(() => server.lines.some((line) => line.includes('"msg":"shutting down"')), "the first signal to be taken");
    // Still replying after the first signal was taken: it waits out the grace period.
    const deltasThen = deltas;
    await until(() => deltas >= deltasThen + 3 || server.child.exitCode !== null, "more of the reply");
    const exitedEarly = server.child.exitCode !== null;
    expect(exitedEarly).toBe(false);
    await until(() => performance.now() > secondAfter, "a second signal's moment", 5_000, 50);

    server.child.kill("SIGTERM");
    expect(await server.child.exited).toBe(1);
    await reading;
    const db = new Database(server.dbPath, { readonly: true });
    expect(db.query("PRAGMA integrity_check").get()).toEqual({ integrity_check: "ok" });
    db.close();
    expect(replies(server.dbPath)[0]).toMatchObject({ role: "user" });
  });
});
