/**
 * `bun run bench load [--clients N] [--seconds S] [--queue-max N] [--rate-limit N]`: the heavy
 * variant of test/load/load.test.ts. `parley serve` (demo model, PARLEY_PARALLEL=2) as a
 * child process; N closed-loop clients (streamed chats, plain chats, listings) for S seconds.
 * Prints requests served, the status mix, p50/p99 latency, max RSS and RSS after the load, and
 * whether RSS came back to within 20 % of its pre-load value. Writes `.bench/load-<time>.json`.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { tempDir } from "../test/support/files";
import { engineGauges, runLoad, seedKeys } from "../test/support/load";
import { startServer } from "../test/support/process";
import { seededRandom } from "../test/support/random";
import { quantile, rssKb } from "../test/support/stats";
import { until } from "../test/support/wait";

const OUT = join(import.meta.dir, "..", ".bench");
const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    clients: { type: "string", default: "100" },
    seconds: { type: "string", default: "30" },
    "queue-max": { type: "string", default: "64" },
    "rate-limit": { type: "string", default: "120" },
  },
});
const clients = Number(values.clients);
const seconds = Number(values.seconds);

const dbPath = join(tempDir("bench-load"), "parley.db");
// One key per client, each honouring Retry-After: the default limits apply as they would to
// well-behaved clients, so most work reaches the engine and the queue.
const keys = await seedKeys(dbPath, clients);
const server = await startServer({
  dbPath,
  adminKey: keys.admin,
  env: { PARLEY_PARALLEL: "2", PARLEY_QUEUE_MAX: values["queue-max"]!, PARLEY_RATE_LIMIT: values["rate-limit"]! },
});
const random = seededRandom();
try {
  await runLoad({ url: server.url, keys: keys.users, clients: 3, durationMs: 500, deadlineMs: 60_000, maxTokens: 32, random });
  const before = rssKb(server.pid);
  const started = performance.now();
  const result = await runLoad({
    url: server.url,
    keys: keys.users,
    clients,
    durationMs: seconds * 1000,
    deadlineMs: 60_000,
    maxTokens: 32,
    pid: server.pid,
    honourRetryAfter: true,
    random,
  });
  const elapsed = (performance.now() - started) / 1000;
  await until(
    async () => {
      const gauges = await engineGauges(server.url, keys.admin);
      return gauges.queued === 0 && gauges.busy === 0;
    },
    "the queue to drain",
    60_000,
  );
  // The JS heap keeps what the peak took until a GC and the allocator's scavenger hand it back,
  // which on an idle server takes about ten seconds: wait for that, up to a minute.
  const drained = performance.now();
  await until(() => rssKb(server.pid) <= before * 1.2, "RSS to settle", 60_000, 500).catch(() => undefined);
  const after = rssKb(server.pid);
  const settledS = Math.round((performance.now() - drained) / 100) / 10;

  const figures = {
    clients,
    seconds: Math.round(elapsed * 10) / 10,
    requests: result.requests,
    per_second: Math.round(result.requests / elapsed),
    outcomes: result.outcomes,
    p50_ms: Math.round(quantile(result.latencies, 0.5)),
    p99_ms: Math.round(quantile(result.latencies, 0.99)),
    rss_before_mib: Math.round(before / 1024),
    rss_max_mib: Math.round(result.maxRssKb / 1024),
    rss_after_mib: Math.round(after / 1024),
    rss_settled_after_s: settledS,
    rss_after_within_20_percent: after <= before * 1.2,
    odd_samples: result.samples,
  };
  const rows: [string, string][] = [
    ["clients × seconds", `${clients} × ${figures.seconds}`],
    ["requests served", `${figures.requests} (${figures.per_second}/s)`],
    [
      "status mix",
      Object.entries(result.outcomes)
        .map(([k, v]) => `${k}: ${v}`)
        .join(", "),
    ],
    ["latency p50 / p99", `${figures.p50_ms} ms / ${figures.p99_ms} ms`],
    ["RSS before / max / after", `${figures.rss_before_mib} / ${figures.rss_max_mib} / ${figures.rss_after_mib} MiB (after ${settledS} s idle)`],
    ["RSS after within 20 %", String(figures.rss_after_within_20_percent)],
  ];
  for (const [name, value] of rows) console.log(`${name.padEnd(26)} ${value}`);
  mkdirSync(OUT, { recursive: true });
  const file = join(OUT, `load-${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
  writeFileSync(file, `${JSON.stringify(figures, null, 2)}\n`);
  console.log(`wrote ${file}`);
  const bad = Object.keys(result.outcomes).some((outcome) => !["200", "429", "503"].includes(outcome));
  process.exitCode = bad ? 1 : 0;
} finally {
  await server.stop();
}
