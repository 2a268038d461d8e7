import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { allowSlowTests, type ChildServer, engineGauges, quantile, rssKb, runLoad, seedKeys, startServer, tempDir, until, withSeed } from "../support";

allowSlowTests();

// The light variant of `bun run bench load`: enough concurrency to overflow a small queue and
// a shared key's rate limit, short enough for CI on two cores.
const CLIENTS = 40;
const DURATION_MS = 6_000;
const DEADLINE_MS = 20_000;

const dbPath = join(tempDir("load"), "parley.db");
const keys = await seedKeys(dbPath, 8);
let server: ChildServer | undefined;
afterAll(() => server?.child.kill("SIGKILL"));

describe("load", () => {
  test(
    `${CLIENTS} clients against parallel 2 and a queue of 6: every request ends in 200, 429 or 503; the queue drains; memory settles`,
    withSeed(async (random) => {
      server = await startServer({
        dbPath,
        adminKey: keys.admin,
        env: { PARLEY_PARALLEL: "2", PARLEY_QUEUE_MAX: "6", PARLEY_RATE_LIMIT: "300" },
      });
      // Warm up every path once, so the baseline includes what the first requests allocate for good.
      await runLoad({ url: server.url, keys: keys.users, clients: 3, durationMs: 300, deadlineMs: DEADLINE_MS, maxTokens: 16, random });
      const before = rssKb(server.pid);

      const result = await runLoad({
        url: server.url,
        keys: keys.users,
        clients: CLIENTS,
        durationMs: DURATION_MS,
        deadlineMs: DEADLINE_MS,
        maxTokens: 16,
        pid: server.pid,
        random,
      });

      await until(async () => {
        const gauges = await engineGauges(server!.url, keys.admin);
        return gauges.queued === 0 && gauges.busy === 0;
      }, "the queue to drain");
      // Generous, and polled: the heap keeps what the peak took until GC and the allocator's
      // scavenger return it (about ten seconds idle), but a per-request leak over thousands of
      // requests would not come back under this bound.
      await until(() => rssKb(server!.pid) < before * 1.5, "RSS to settle", 20_000).catch(() => {});
      const after = rssKb(server.pid);
      console.log(
        `load: ${result.requests} requests ${JSON.stringify(result.outcomes)}; p50 ${Math.round(quantile(result.latencies, 0.5))} ms, ` +
          `p99 ${Math.round(quantile(result.latencies, 0.99))} ms; RSS before ${before >> 10} MiB, max ${result.maxRssKb >> 10} MiB, after ${after >> 10} MiB`,
      );

      const unexpected = Object.keys(result.outcomes).filter((outcome) => !["200", "429", "503"].includes(outcome));
      expect({ unexpected, samples: result.samples }).toEqual({ unexpected: [], samples: [] });
      // The load must actually have overflowed something, or this proves little.
      expect(result.outcomes["200"]).toBeGreaterThan(CLIENTS);
      expect((result.outcomes["503"] ?? 0) + (result.outcomes["429"] ?? 0)).toBeGreaterThan(0);
      expect(after).toBeLessThan(before * 1.5);

      const health = await fetch(`${server.url}/healthz`);
      expect(health.status).toBe(200);
      server.child.kill("SIGTERM");
      expect(await server.child.exited).toBe(0);
    }),
    60_000,
  );
});
