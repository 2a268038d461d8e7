/**
 * `bun run bench scale [--quick] [--messages N] [--seconds S] [--clients C]`: what scaling out
 * costs. (1) The message listing on PostgreSQL against SQLite over the same data (1 M messages by
 * default, generated in SQL), served in-process: requests/s and p99. (2) Chat through HAProxy
 * (deploy/haproxy.cfg) with 1, 2 and 3 `parley serve` nodes on one PostgreSQL and the demo model.
 * All on one machine: the nodes share its cores, so (2) shows the overhead of routing and shared
 * storage, and that every turn succeeds, not a speed-up. Writes `.bench/scale-<time>.json`.
 * `--quick` (20 k messages, 2 s per measurement) checks the harness end to end.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { PgStorage } from "../src/db/pg/storage";
import type { SqliteStorage } from "../src/db/sqlite/storage";
import type { Storage } from "../src/db/storage";
import { serveApp } from "../test/support/app";
import { postgresBackend, sqliteBackend } from "../test/support/backends";
import { tempDir } from "../test/support/files";
import { startHaproxy } from "../test/support/haproxy";
import { bearer } from "../test/support/http";
import { freshPostgresDb } from "../test/support/postgres";
import { type ChildServer, startServer } from "../test/support/process";
import { seededRandom } from "../test/support/random";
import { readSse } from "../test/support/sse";
import { quantile } from "../test/support/stats";

const ROOT = join(import.meta.dir, "..");
const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    quick: { type: "boolean", default: false },
    messages: { type: "string" },
    seconds: { type: "string" },
    clients: { type: "string", default: "8" },
  },
});
const quick = values.quick!;
const MESSAGES = Number(values.messages ?? (quick ? 20_000 : 1_000_000));
const SECONDS = Number(values.seconds ?? (quick ? 2 : 10));
const CLIENTS = Number(values.clients);
const USERS = 10;
const CONVERSATIONS = 1_000;
const ADMIN_KEY = "bench-scale-admin-key-0123456789abcdef";
const random = seededRandom();

const pgBackend = postgresBackend();
if (pgBackend.missing) throw new Error(`this benchmark needs PostgreSQL: ${pgBackend.missing}`);

interface Measured {
  requests: number;
  errors: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
}

/** `clients` closed loops of `send` for SECONDS; a send that throws counts as an error. */
async function closedLoop(clients: number, send: (client: number) => Promise<void>): Promise<Measured> {
  const latencies: number[] = [];
  let errors = 0;
  const end = performance.now() + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: clients }, async (_, client) => {
      while (performance.now() < end) {
        const started = performance.now();
        try {
          await send(client);
          latencies.push(performance.now() - started);
        } catch {
          errors++;
        }
      }
    }),
  );
  return {
    requests: latencies.length,
    errors,
    perSecond: latencies.length / SECONDS,
    p50Ms: quantile(latencies, 0.5),
    p99Ms: quantile(latencies, 0.99),
  };
}

/**
 * The same rows in both databases: users 1..10, conversation c belongs to user 1 + (c - 1) % 10,
 * message i to conversation 1 + i % 1000; created_at repeats in threes (ties), roles alternate.
 */
const rowsSql = (series: string) => `
  SELECT 1 + i % ${USERS}, 1 + i % ${CONVERSATIONS}, CASE WHEN i % 2 = 0 THEN 'user' ELSE 'assistant' END,
         'message ' || i, 1795000000000 + (i / 3) * 1000 FROM ${series}`;

async function seed(storage: Storage): Promise<string[]> {
  const keys: string[] = [];
  for (let u = 1; u <= USERS; u++) keys.push((await storage.keys.create(`user${u}`, "user")).key);
  for (let c = 1; c <= CONVERSATIONS; c++) await storage.conversations.findOrCreate(1 + ((c - 1) % USERS), `conversation-${c}`);
  return keys;
}

async function seedSqlite(storage: SqliteStorage): Promise<string[]> {
  const keys = await seed(storage);
  storage.sqlite.run(`INSERT INTO messages (user_id, conversation_id, role, content, created_at)
    WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < ${MESSAGES - 1}) ${rowsSql("s")}`);
  storage.sqlite.run("ANALYZE");
  return keys;
}

async function seedPostgres(storage: PgStorage): Promise<string[]> {
  const keys = await seed(storage);
  const sql = storage.db.$client;
  // One bulk insert with the counting triggers off, then the counters set once.
  await sql.unsafe("ALTER TABLE messages DISABLE TRIGGER USER");
  await sql.unsafe(`INSERT INTO messages (user_id, conversation_id, role, content, created_at) ${rowsSql(`generate_series(0, ${MESSAGES - 1}) AS i`)}`);
  await sql.unsafe("ALTER TABLE messages ENABLE TRIGGER USER");
  await sql.unsafe("INSERT INTO user_message_counts SELECT user_id, count(*) FROM messages GROUP BY user_id");
  await sql.unsafe("INSERT INTO conversation_message_counts SELECT conversation_id, count(*) FROM messages GROUP BY conversation_id");
  await sql.unsafe("VACUUM ANALYZE");
  return keys;
}

async function listing(name: string, storage: Storage, keys: string[]) {
  const server = serveApp({ storage });
  const pages = Math.floor(MESSAGES / USERS / 20);
  try {
    // Mostly the first pages (what people read), some deep ones (what crawlers read).
    return await closedLoop(CLIENTS, async (client) => {
      const page = random.next() < 0.9 ? random.int(1, 5) : random.int(1, pages);
      const response = await fetch(`${server.url}/api/v1.0/chat/messages?rows_per_page=20&current_page=${page}&sort_by=created_at:desc`, {
        headers: bearer(keys[client % keys.length]!),
      });
      if (response.status !== 200) throw new Error(`${name}: ${response.status}`);
      await response.arrayBuffer();
    });
  } finally {
    await server.stop();
  }
}

async function chatThrough(nodeCount: number) {
  const db = await freshPostgresDb(`scale_${nodeCount}`);
  const nodes: ChildServer[] = [];
  try {
    for (let n = 0; n < nodeCount; n++) {
      nodes.push(await startServer({ dbPath: db, adminKey: ADMIN_KEY, env: { PARLEY_DATA_DIR: tempDir(`scale-node${n}`), PARLEY_RATE_LIMIT: "0" } }));
    }
    const balancer = await startHaproxy(nodes.map((node) => node.url));
    try {
      const turns = new Map<number, number>();
      return await closedLoop(CLIENTS, async (client) => {
        const conversation = `client-${client}`;
        const turn = (turns.get(client) ?? 0) + 1;
        turns.set(client, turn);
        const response = await fetch(`${balancer.url}/api/v1.0/chat`, {
          method: "POST",
          headers: { ...bearer(ADMIN_KEY), "content-type": "application/json", "x-conversation-id": conversation },
          body: JSON.stringify({ conversation_id: conversation, message: `turn ${turn}`, max_tokens: 16, stream: client % 2 === 0 }),
        });
        if (response.status !== 200) throw new Error(`chat: ${response.status}`);
        if (client % 2 !== 0) return void (await response.json());
        for await (const { event } of readSse(response)) if (event === "error") throw new Error("stream error");
      });
    } finally {
      await balancer.stop();
    }
  } finally {
    await Promise.all(nodes.map((node) => node.stop()));
  }
}

const fmt = (m: Measured) =>
  `${m.perSecond.toFixed(1).padStart(8)} | ${m.p50Ms.toFixed(1).padStart(7)} | ${m.p99Ms.toFixed(1).padStart(7)} | ${String(m.errors).padStart(6)}`;
const results: Record<string, Measured> = {};

console.log(`seeding ${MESSAGES.toLocaleString("en")} messages (${USERS} users, ${CONVERSATIONS} conversations) into SQLite and PostgreSQL…`);
const sqlite = await sqliteBackend.open("bench-scale");
const postgres = await pgBackend.open("bench_scale");
let started = performance.now();
const sqliteKeys = await seedSqlite(sqlite.storage as SqliteStorage);
console.log(`  SQLite ${((performance.now() - started) / 1000).toFixed(1)} s`);
started = performance.now();
const pgKeys = await seedPostgres(postgres.storage as PgStorage);
console.log(`  PostgreSQL ${((performance.now() - started) / 1000).toFixed(1)} s`);
results["listing sqlite"] = await listing("sqlite", sqlite.storage, sqliteKeys);
results["listing postgres"] = await listing("postgres", postgres.storage, pgKeys);
await sqlite.storage.close();
await postgres.storage.close();
for (const n of [1, 2, 3]) results[`chat ${n} node${n > 1 ? "s" : ""}`] = await chatThrough(n);

console.log(`\n${CLIENTS} clients, ${SECONDS} s each, seed ${random.seed}${quick ? " (--quick: not a measurement)" : ""}\n`);
console.log("| measurement          |    req/s | p50 ms  | p99 ms  | errors |");
console.log("|----------------------|---------:|--------:|--------:|-------:|");
for (const [name, m] of Object.entries(results)) console.log(`| ${name.padEnd(20)} | ${fmt(m)} |`);
console.log(
  "\nChat runs every node on this one machine with the demo model: the nodes share its cores, so the\n" +
    "figures show what HAProxy and shared PostgreSQL cost and that every turn succeeds, not a speed-up\n" +
    "(that needs one node per machine).",
);
const out = join(ROOT, ".bench");
mkdirSync(out, { recursive: true });
const file = join(out, `scale-${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
writeFileSync(file, JSON.stringify({ messages: MESSAGES, seconds: SECONDS, clients: CLIENTS, quick, seed: random.seed, results }, null, 2));
console.log(`written ${file.slice(ROOT.length + 1)}`);
process.exit(0);
