/**
 * Many users at once: B8 sweeps the number of concurrent streams, one fresh server per
 * level and side; B9 times a short request that arrives while three others decode.
 */

import { median, quantile, sum } from "../../test/support/stats";
import type { TurnTiming } from "./clients";
import { alternating, type Context, compared, type PerSide, type Row, ratio, type Scenario, type Side, type SideName } from "./harness";
import { userMessage } from "./text";

/** B8's levels unless the run names others (`--streams`). */
export const STREAM_LEVELS = [1, 2, 4, 8];
const BUSY_STREAMS = 3;

/** Completion tokens of all streams over the window from the first token to the last across them. */
export function aggregateTps(turns: readonly TurnTiming[]): number {
  return tokensOver(turns, Math.min(...turns.map((t) => t.firstAt)));
}

/**
 * The same from the requests' sending: where the first replies start sooner than the others (the
 * prompts evaluated one by one), the decode window above starts sooner, this one does not.
 */
export function endToEndTps(turns: readonly TurnTiming[]): number {
  return tokensOver(turns, Math.min(...turns.map((t) => t.firstAt - t.ttftMs)));
}

const tokensOver = (turns: readonly TurnTiming[], from: number) =>
  (sum(turns.map((t) => t.completionTokens)) * 1000) / (Math.max(...turns.map((t) => t.lastAt)) - from);

const shortPrompt = (seed: number) => userMessage(8000 + seed, 50);

interface Level {
  aggregateTps: number;
  /** Each stream's own decode rate, over all runs: the slowest tenth and the middle (fairness). */
  streamP10: number;
  streamP50: number;
  runs: number[];
  /** Each round's tokens over the time from the requests' sending. */
  endToEndRuns: number[];
  /** Each stream's completion tokens: fewer than asked for means a reply stopped early. */
  streamTokens: number[];
}

export const concurrencySweep: Scenario = {
  ids: ["B8"],
  async run(ctx) {
    const levels: PerSide<Level[]> = {};
    const streamLevels = ctx.streamLevels ?? STREAM_LEVELS;
    for (const n of streamLevels) {
      const round = (side: Side, url: string, tag: string, seed: (i: number) => number) =>
        Promise.all(Array.from({ length: n }, (_, i) => side.ask(url, `b8-${tag}-${i}`, shortPrompt(seed(i)), ctx.decodeTokens)));
      const { runs: measured } = await alternating(
        ctx,
        n,
        (side, server) => round(side, server.url, "warm-up", (i) => 100 * i),
        (side, url, r) => round(side, url, String(r), (i) => 1000 * n + 100 * r + i),
        ctx.rounds,
      );
      for (const [name, runs] of Object.entries(measured) as [SideName, TurnTiming[][]][]) {
        const streams = runs.flat();
        const level = {
          aggregateTps: median(runs.map(aggregateTps)),
          streamP10: quantile(
            streams.map((t) => t.decodeTps),
            0.1,
          ),
          streamP50: quantile(
            streams.map((t) => t.decodeTps),
            0.5,
          ),
          runs: runs.map(aggregateTps),
          endToEndRuns: runs.map(endToEndTps),
          streamTokens: streams.map((t) => t.completionTokens),
        };
        console.error(`  ${name}, ${n} at once: ${level.aggregateTps.toFixed(1)} tok/s`);
        (levels[name] ??= []).push(level);
      }
    }
    const series = (name: SideName, pick: (level: Level) => number) => levels[name]?.map(pick);
    // Paired rows where the level's rounds are (aggregate rates), the two sides' medians elsewhere (per-stream quantiles).
    const row = (what: string, i: number, pick: (level: Level) => number | number[], target?: Row["target"]): Row => {
      const [mine, theirs] = [levels.parley?.[i], levels.llamaServer?.[i]].map((level) => level && pick(level));
      const workload = ctx.workload;
      if (Array.isArray(mine) || Array.isArray(theirs)) return compared({ id: "B8", what, target, workload }, mine as number[], theirs as number[] | undefined);
      return { id: "B8", what, workload, parley: mine, yardstick: theirs, ratio: ratio(mine, theirs), target };
    };
    const streams = (n: number) => `${n} stream${n === 1 ? "" : "s"}`;
    const targets: Record<number, Row["target"]> = ctx.streamLevels
      ? Object.fromEntries(ctx.streamLevels.map((n) => [n, [">=", 0.95]]))
      : { 1: [">=", 0.95], 4: [">=", 1.0] };
    const aggregate = streamLevels.map((n, i) => row(`aggregate decode tok/s, ${streams(n)}`, i, (l) => l.runs, targets[n]));
    const endToEnd = streamLevels.map((n, i) => row(`aggregate tok/s from the requests' sending, ${streams(n)}`, i, (l) => l.endToEndRuns));
    const fairness = streamLevels.flatMap((n, i) =>
      n === 1 ? [] : [row(`per-stream tok/s p50, ${streams(n)}`, i, (l) => l.streamP50), row(`per-stream tok/s p10, ${streams(n)}`, i, (l) => l.streamP10)],
    );
    // The chart's series: categories on the x axis, one value per category and side.
    aggregate[0]!.detail = {
      categories: streamLevels.map(String),
      parley: series("parley", (l) => l.aggregateTps),
      llamaServer: series("llamaServer", (l) => l.aggregateTps),
      ratios: aggregate.map((row) => row.interval ?? null),
      levels,
    };
    return [...aggregate, ...endToEnd, ...fairness];
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
    // Its own message, of the same length, so no prompt cache serves it.
    const { runs } = await alternating(
      ctx,
      BUSY_STREAMS + 1,
      (side, server) => side.ask(server.url, "warm-up", shortPrompt(0), ctx.decodeTokens),
      async (side, url, r) => ({ aloneMs: (await side.ask(url, `b9-alone-${r}`, shortPrompt(700 + r), 8)).ttftMs, ...(await whileBusy(side, url, ctx, r)) }),
      ctx.rounds,
    );
    const summary = (of: { aloneMs: number; short: TurnTiming; busy: Busy }[] | undefined) =>
      of && {
        aloneMs: median(of.map((run) => run.aloneMs)),
        busyMs: median(of.map((run) => run.short.ttftMs)),
        rounds: of.map((run) => ({ aloneMs: run.aloneMs, busyMs: run.short.ttftMs, ...run.busy })),
      };
    const [mine, theirs] = [summary(runs.parley), summary(runs.llamaServer)];
    // Each round's slowdown, paired with the other side's of the same round.
    const slowdowns = (m: typeof mine) => m?.rounds.map((round) => round.busyMs / round.aloneMs);
    return [
      compared(
        {
          id: "B9",
          what: `short request TTFT while ${BUSY_STREAMS} decode ÷ alone (parallel ${BUSY_STREAMS + 1})`,
          target: ["<=", 1.0],
          workload: ctx.workload,
          detail: {
            categories: ["alone", `while ${BUSY_STREAMS} decode`],
            parley: mine && [mine.aloneMs, mine.busyMs],
            llamaServer: theirs && [theirs.aloneMs, theirs.busyMs],
            rounds: { parley: mine?.rounds, llamaServer: theirs?.rounds },
          },
        },
        slowdowns(mine),
        slowdowns(theirs),
      ),
      { id: "B9", what: "short request TTFT ms alone", parley: mine?.aloneMs, yardstick: theirs?.aloneMs, ratio: ratio(mine?.aloneMs, theirs?.aloneMs) },
      {
        id: "B9",
        what: `short request TTFT ms while ${BUSY_STREAMS} decode`,
        parley: mine?.busyMs,
        yardstick: theirs?.busyMs,
        ratio: ratio(mine?.busyMs, theirs?.busyMs),
      },
    ];
  },
};
