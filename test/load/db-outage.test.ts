/**
 * Two nodes on one PostgreSQL under chat traffic while the database restarts and while its
 * connections are killed: every request is answered, in bounded time, with 200 or a 503 that says
 * to retry (never a 500, never a hang); readiness follows the database; everything acknowledged is
 * stored exactly once; both nodes serve again without a restart. And a node started while the
 * database is down waits for it.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import postgres from "postgres";
import type { ChatReply } from "../../src/http/contract";
import {
  allowSlowTests,
  bearer,
  type ChildServer,
  freshPostgresDb,
  type PostgresServer,
  postgresMissing,
  readSse,
  seededRandom,
  startPostgres,
  startServer,
  tempDir,
  until,
} from "../support";

allowSlowTests();

setDefaultTimeout(120_000);

const ADMIN_KEY = "outage-test-admin-key-0123456789abcdef";
const DB_TIMEOUT_MS = 1_000;
/** No request may take longer: the database's deadline, a retry, a short reply, and slack for a busy machine. */
const ANSWER_BOUND_MS = 6_000;
const missing = postgresMissing();

interface Outcome {
  kind: "chat" | "stream" | "list";
  /** The HTTP status, or `hung`, or the stream's error code. */
  result: string;
  ms: number;
  retryAfter?: string;
  acked?: { conversation: string; content: string; reply: ChatReply };
}

describe.skipIf(missing !== undefined)("a PostgreSQL outage", () => {
  let server: PostgresServer;
  let db: string;
  let nodes: ChildServer[] = [];

  beforeAll(async () => {
    // Its own server: this test stops and starts it.
    server = await startPostgres();
    db = await freshPostgresDb("outage", server);
    nodes = await Promise.all(
      [1, 2].map((n) =>
        startServer({
          dbPath: db,
          adminKey: ADMIN_KEY,
          timeoutMs: 60_000,
          env: { PARLEY_DATA_DIR: tempDir(`outage-node${n}`), PARLEY_LEASE_TTL_S: "2", PARLEY_RATE_LIMIT: "0", PARLEY_DB_TIMEOUT_MS: String(DB_TIMEOUT_MS) },
        }),
      ),
    );
  });
  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop()));
    server?.stop();
  });

  const sql = () => postgres({ host: server.socketDir, user: "postgres", database: new URL(db).pathname.slice(1), max: 1, onnotice: () => {} });

  async function request(node: ChildServer, kind: Outcome["kind"], conversation: string, content: string): Promise<Outcome> {
    const started = performance.now();
    const signal = AbortSignal.timeout(ANSWER_BOUND_MS * 3);
    const ms = () => performance.now() - started;
    try {
      if (kind === "list") {
        const response = await fetch(`${node.url}/api/v1.0/chat/messages?rows_per_page=5`, { headers: bearer(ADMIN_KEY), signal });
        await response.text();
        return { kind, result: String(response.status), ms: ms(), retryAfter: response.headers.get("retry-after") ?? undefined };
      }
      const response = await fetch(`${node.url}/api/v1.0/chat`, {
        method: "POST",
        headers: { ...bearer(ADMIN_KEY), "content-type": "application/json" },
        body: JSON.stringify({ conversation_id: conversation, message: content, stream: kind === "stream", max_tokens: 8, temperature: 0 }),
        signal,
      });
      if (response.status !== 200) {
        const body = await response.text();
        return { kind, result: `${response.status} ${body.slice(0, 120)}`, ms: ms(), retryAfter: response.headers.get("retry-after") ?? undefined };
      }
      if (kind === "chat") return { kind, result: "200", ms: ms(), acked: { conversation, content, reply: (await response.json()) as ChatReply } };
      for await (const { event, data } of readSse(response)) {
        if (event === "done") return { kind, result: "200", ms: ms(), acked: { conversation, content, reply: data as ChatReply } };
        if (event === "error") return { kind, result: `error event ${(data as { error: { code: string } }).error.code}`, ms: ms() };
      }
      return { kind, result: "stream ended without done", ms: ms() };
    } catch (error) {
      return { kind, result: signal.aborted ? "hung" : `connection error ${String(error)}`, ms: ms() };
    }
  }

  test("restarted, then its connections killed: 200 or 503 + Retry-After within the bound, readiness follows, nothing acknowledged lost or doubled, recovery without restart", async () => {
    const random = seededRandom();
    const outcomes: Outcome[] = [];
    let stopping = false;
    const clients = Array.from({ length: 4 }, async (_, client) => {
      const node = nodes[client % 2]!;
      for (let n = 0; !stopping; n++) {
        const kind = (["chat", "stream", "list"] as const)[random.int(0, 2)]!;
        outcomes.push(await request(node, kind, `outage-${client}`, `client ${client} turn ${n}`));
      }
    });
    const acked = () => outcomes.filter((outcome) => outcome.acked).length;
    const unavailable = () => outcomes.filter((outcome) => outcome.result.startsWith("503")).length;
    const ready = async (node: ChildServer) => (await fetch(`${node.url}/readyz`)).status;

    await until(() => acked() >= 8, "traffic before the outage", 60_000);
    server.pause();
    await until(() => unavailable() >= 6, "requests answered 503 during the outage", 30_000);
    for (const node of nodes) {
      expect(await ready(node)).toBe(503);
      expect((await fetch(`${node.url}/healthz`)).status).toBe(200);
    }
    const beforeRecovery = acked();
    server.resume();
    await until(async () => (await Promise.all(nodes.map(ready))).every((status) => status === 200), "both nodes ready again", 30_000);
    await until(() => acked() >= beforeRecovery + 8, "traffic after the restart", 60_000);

    // Every connection of the pools killed under them, mid-traffic: reads are retried on new
    // connections; while postgres.js reconnects under the traffic's own retries, a read may still
    // get the clean 503, never more, and within a few seconds every node reads again.
    const admin = sql();
    try {
      await admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`;
    } finally {
      await admin.end();
    }
    const killed = performance.now();
    for (const node of nodes)
      await until(async () => (await request(node, "list", "", "")).result === "200", "the node to read again after its connections were killed", 3_000);
    console.log(`reads again on both nodes ${Math.round(performance.now() - killed)} ms after every connection was killed`);
    const beforeKill = acked();
    await until(() => acked() >= beforeKill + 8, "traffic after the connections were killed", 60_000);
    stopping = true;
    await Promise.all(clients);

    const tally = new Map<string, number>();
    for (const { kind, result } of outcomes) tally.set(`${kind} ${result.split(" ")[0]}`, (tally.get(`${kind} ${result.split(" ")[0]}`) ?? 0) + 1);
    console.log(
      `outage: ${outcomes.length} requests ${JSON.stringify(Object.fromEntries(tally))}; slowest ${Math.round(Math.max(...outcomes.map((o) => o.ms)))} ms (seed ${random.seed})`,
    );
    const wrong = outcomes.filter(
      (outcome) =>
        !(outcome.result === "200" || (outcome.result.startsWith("503") && outcome.retryAfter !== undefined) || outcome.result === "error event overloaded") ||
        outcome.ms > ANSWER_BOUND_MS,
    );
    expect(wrong.slice(0, 5)).toEqual([]);
    for (const node of nodes) expect(node.errorLines.slice(0, 3)).toEqual([]);

    // Each acknowledged turn: its message and its reply stored once, the reply right after it.
    const check = sql();
    try {
      const rows = await check<{ id: number; role: string; content: string; conversation: string }[]>`
        SELECT m.id::int AS id, m.role, m.content, c.external_id AS conversation
        FROM messages m JOIN conversations c ON c.id = m.conversation_id ORDER BY m.created_at, m.id`;
      for (const { acked: turn } of outcomes.filter((outcome) => outcome.acked)) {
        const mine = rows.filter((row) => row.conversation === turn!.conversation);
        const at = mine.findIndex((row) => row.id === turn!.reply.user_message.id);
        expect(mine[at]?.content).toBe(turn!.content);
        expect(mine[at + 1]?.id).toBe(turn!.reply.message.id);
        expect(mine.filter((row) => row.role === "user" && row.content === turn!.content)).toHaveLength(1);
      }
      // No reply without its question: a turn that failed left at most its question.
      for (const [i, row] of rows.entries())
        if (row.role === "assistant") expect(rows.slice(0, i).some((before) => before.conversation === row.conversation && before.role === "user")).toBe(true);
    } finally {
      await check.end();
    }
  });

  test("a node started while the database is down says so once a second and becomes ready when it comes up; with no wait it refuses in one line", async () => {
    server.pause();
    const waiting: string[] = [];
    let resumed = false;
    try {
      const refused = Bun.spawn(["bun", "src/cli.ts", "serve"], {
        cwd: `${import.meta.dir}/../..`,
        env: { ...Bun.env, PARLEY_DB: db, PARLEY_PORT: "0", PARLEY_DB_WAIT_S: "0" },
        stdout: "pipe",
        stderr: "pipe",
      });
      const [code, err] = await Promise.all([refused.exited, new Response(refused.stderr).text()]);
      expect(code).toBe(1);
      expect(err.trim().split("\n")).toEqual([expect.stringMatching(/^parley: the database ".*" cannot be reached \(.*\); waited 0 s \(PARLEY_DB_WAIT_S\)$/)]);

      const late = startServer({
        dbPath: db,
        timeoutMs: 60_000,
        env: { PARLEY_DATA_DIR: tempDir("outage-late"), PARLEY_DB_WAIT_S: "60", PARLEY_DB_TIMEOUT_MS: String(DB_TIMEOUT_MS) },
        onLine: (line) => {
          if (line.includes("the database cannot be reached")) waiting.push(line);
          // Up again once the node has tried twice.
          if (waiting.length === 2 && !resumed) {
            resumed = true;
            server.resume();
          }
        },
      });
      const node = await late;
      nodes.push(node);
      expect(waiting.length).toBeGreaterThanOrEqual(2);
      for (const line of waiting) expect(JSON.parse(line)).toMatchObject({ level: "warn", attempt: expect.any(Number), reason: expect.any(String) });
      expect((await request(node, "chat", "late", "hello")).result).toBe("200");
    } finally {
      if (!resumed) server.resume();
    }
  });
});
