/**
 * Many users at once (issue 11): B8 sweeps the number of concurrent streams, one fresh server per
 * level and side; B9 times a short request that arrives while three others decode.
 */
import type { TurnTiming } from "./clients";
import { ratio, sides, withServer, type Context, type Row, type Scenario, type Side, type SideName } from "./harness";
import { median, quantile, sum } from "../../test/support/stats";
import { userMessage } from "./text";

export const STREAM_LEVELS = [1, 2, 4, 8];
const BUSY_STREAMS = 3;

/** Completion tokens of all streams over the window from the first token to the last across them. */
export function aggregateTps(turns: readonly TurnTiming[]): number {
  const window = Math.max(...turns.map((t) => t.lastAt)) - Math.min(...turns.map((t) => t.firstAt));
  return (sum(turns.map((t) => t.completionTokens)) * 1000) / window;
}

const shortPrompt = (seed: number) => userMessage(8000 + seed, 50);

/** A fresh server with `parallel` slots; its first reply (graph allocation, cold caches) is not measured. */
function onWarmServer<T>(side: Side, parallel: number, use: (url: string) => Promise<T>): Promise<T> {
  return withServer(side.start(parallel), async (server) => {
    await side.ask(server.url, "warm-up", shortPrompt(0), 4);
    return use(server.url);
  });
}

type PerSide<T> = Partial<Record<SideName, T>>;

interface Level {
  aggregateTps: number;
  /** Each stream's own decode rate, over all runs: the slowest tenth and the middle (fairness). */
  streamP10: number;
  streamP50: number;
  runs: number[];
  /** Each stream's completion tokens: fewer than asked for means a reply stopped early. */
  streamTokens: number[];
}

export const concurrencySweep: Scenario = {
  ids: ["B8"],
  async run(ctx) {
    const levels: PerSide<Level[]> = {};
    // Sides alternate within a level, so a change in the machine's load hits both alike.
    for (const n of STREAM_LEVELS) {
      for (const side of sides(ctx)) {
        const level = await onWarmServer(side, n, async (url) => {
          const runs: number[] = [];
          const streams: number[] = [];
          const streamTokens: number[] = [];
          for (let r = 0; r < ctx.runs; r++) {
            const seed = (i: number) => 1000 * n + 100 * r + i;
            const turns = await Promise.all(Array.from({ length: n }, (_, i) => side.ask(url, `b8-${r}-${i}`, shortPrompt(seed(i)), ctx.decodeTokens)));
            runs.push(aggregateTps(turns));
            streams.push(...turns.map((t) => t.decodeTps));
            streamTokens.push(...turns.map((t) => t.completionTokens));
          }
          return { aggregateTps: median(runs), streamP10: quantile(streams, 0.1), streamP50: quantile(streams, 0.5), runs, streamTokens };
        });
        console.error(`  ${side.name}, ${n} at once: ${level.aggregateTps.toFixed(1)} tok/s`);
        (levels[side.name] ??= []).push(level);
      }
    }
    const series = (name: SideName, pick: (level: Level) => number) => levels[name]?.map(pick);
    const row = (what: string, i: number, pick: (level: Level) => number, target?: Row["target"]): Row => {
      const [mine, theirs] = [series("parley", pick)?.[i], series("llamaServer", pick)?.[i]];
      return { id: "B8", what, parley: mine, yardstick: theirs, ratio: ratio(mine, theirs), target };
    };
    const streams = (n: number) => `${n} stream${n === 1 ? "" : "s"}`;
    const targets: Record<number, Row["target"]> = { 1: [">=", 0.95], 4: [">=", 1.0] };
    const aggregate = STREAM_LEVELS.map((n, i) => row(`aggregate decode tok/s, ${streams(n)}`, i, (l) => l.aggregateTps, targets[n]));
    const fairness = STREAM_LEVELS.flatMap((n, i) =>
      n === 1
        ? []
        : [row(`per-stream tok/s p50, ${streams(n)}`, i, (l) => l.streamP50), row(`per-stream tok/s p10, ${streams(n)}`, i, (l) => l.streamP10)],
    );
    // The chart's series: categories on the x axis, one value per category and side.
    aggregate[0]!.detail = {
      categories: STREAM_LEVELS.map(String),
      parley: series("parley", (l) => l.aggregateTps),
      llamaServer: series("llamaServer", (l) => l.aggregateTps),
      levels,
    };
    return [...aggregate, ...fairness];
  },
};

interface Busy {
  /** How many long replies were still decoding when the short one's first token came: the measurement holds only if all were. */
  stillDecoding: number;
  longTokens: number[];
}

/** The short request, sent once `BUSY_STREAMS` long replies have each received their first token. */
async function whileBusy(side: Side, url: string, ctx: Context, run: number): Promise<{ short: TurnTiming; busy: Busy }> {
  const first = Array.from({ length: BUSY_STREAMS }, () => Promise.withResolvers<void>());
  const long = first.map((started, i) => side.ask(url, `b9-long-${run}-${i}`, shortPrompt(500 + 10 * run + i), ctx.decodeTokens, started.resolve));
  // A long stream that fails (or ends without a token) must not leave this waiting forever.
  await Promise.race([Promise.all(first.map((f) => f.promise)), Promise.all(long)]);
  const short = await side.ask(url, `b9-short-${run}`, shortPrompt(600 + run), 8);
  const longs = await Promise.all(long);
  const busy = { stillDecoding: longs.filter((t) => t.lastAt > short.firstAt).length, longTokens: longs.map((t) => t.completionTokens) };
  if (busy.stillDecoding < BUSY_STREAMS && !ctx.quick) {
    console.error(`  B9 ${side.name}: only ${busy.stillDecoding} of ${BUSY_STREAMS} long replies (${busy.longTokens.join(", ")} tokens) were still decoding`);
  }
  return { short, busy };
}

export const ttftWhileBusy: Scenario = {
  ids: ["B9"],
  async run(ctx) {
    const measured: PerSide<{ aloneMs: number; busyMs: number; busy: Busy[] }> = {};
    for (const side of sides(ctx)) {
      measured[side.name] = await onWarmServer(side, BUSY_STREAMS + 1, async (url) => {
        const alone: number[] = [];
        const busyMs: number[] = [];
        const busy: Busy[] = [];
        for (let r = 0; r < ctx.runs; r++) {
          // Its own message, of the same length, so no prompt cache serves it.
          alone.push((await side.ask(url, `b9-alone-${r}`, shortPrompt(700 + r), 8)).ttftMs);
          const run = await whileBusy(side, url, ctx, r);
          busyMs.push(run.short.ttftMs);
          busy.push(run.busy);
        }
        return { aloneMs: median(alone), busyMs: median(busyMs), busy };
      });
    }
    const { parley: mine, llamaServer: theirs } = measured;
    const slowdown = (m: typeof mine) => m && m.busyMs / m.aloneMs;
    return [
      {
        id: "B9",
        what: `short request TTFT while ${BUSY_STREAMS} decode ÷ alone (parallel ${BUSY_STREAMS + 1})`,
        parley: slowdown(mine),
        yardstick: slowdown(theirs),
        ratio: ratio(slowdown(mine), slowdown(theirs)),
        target: ["<=", 1.0],
        detail: {
          categories: ["alone", `while ${BUSY_STREAMS} decode`],
          parley: mine && [mine.aloneMs, mine.busyMs],
          llamaServer: theirs && [theirs.aloneMs, theirs.busyMs],
          busy: { parley: mine?.busy, llamaServer: theirs?.busy },
        },
      },
      { id: "B9", what: "short request TTFT ms alone", parley: mine?.aloneMs, yardstick: theirs?.aloneMs, ratio: ratio(mine?.aloneMs, theirs?.aloneMs) },
      { id: "B9", what: `short request TTFT ms while ${BUSY_STREAMS} decode`, parley: mine?.busyMs, yardstick: theirs?.busyMs, ratio: ratio(mine?.busyMs, theirs?.busyMs) },
    ];
  },
};
