/**
 * B10: one conversation that outgrows the context (issue #34): its time to first token turn by
 * turn, and after the first turn that no longer fits against the turns before it. A turn past the
 * context should cost about what a turn before it cost.
 */
import { parleyTurn, type TurnTiming } from "./clients";
import { parley, withServer, type Context, type Row, type Scenario } from "./harness";
import { median, quantile } from "../../test/support/stats";
import { userMessage } from "./text";

/** The context the conversation outgrows, and how many turns it runs. */
const CONTEXT = 1024;
const TURNS = 60;
/** The turns before the first overflow that set the yardstick. */
const BEFORE = 8;
/** The words: 16-word messages. */
const MESSAGE_TOKENS = 26;

/** The first turn whose prompt reused less than the whole of the previous turn's: its window moved. */
function firstOverflow(timings: readonly TurnTiming[]): number | undefined {
  for (let t = 1; t < timings.length; t++) if ((timings[t]!.cachedTokens ?? 0) < (timings[t - 1]!.promptTokens ?? 0)) return t;
  return undefined;
}

export const contextOverflow: Scenario = {
  ids: ["B10"],
  async run(ctx: Context): Promise<Row[]> {
    // The quick run's demo model says less a turn: the same context, fewer turns, still past it.
    const turns = ctx.quick ? 24 : TURNS;
    const context = CONTEXT;
    const timings = await withServer(parley({ ...ctx, contextSize: context }, 1), async (server) => {
      const series: TurnTiming[] = [];
      for (let t = 1; t <= turns; t++) series.push(await parleyTurn(server.url, "overflow", userMessage(10_000 + t, MESSAGE_TOKENS), ctx.replyTokens));
      return series;
    });
    const ttft = timings.map((turn) => turn.ttftMs);
    const overflow = firstOverflow(timings);
    const detail = { parley: ttft, parleyCachedTokens: timings.map((turn) => turn.cachedTokens ?? 0), overflowAt: overflow === undefined ? undefined : overflow + 1 };
    if (overflow === undefined) return [{ id: "B10", what: `the conversation never outgrew the ${context}-token context`, detail }];
    if (overflow < BEFORE) return [{ id: "B10", what: `the conversation outgrew the ${context}-token context at turn ${overflow + 1}, before ${BEFORE} turns to compare with`, detail }];
    const before = ttft.slice(overflow - BEFORE, overflow);
    const after = ttft.slice(overflow);
    const p95 = (samples: number[]) => quantile(samples, 0.95);
    return [
      {
        id: "B10",
        what: `TTFT past a ${context}-token context ÷ the ${BEFORE} turns before, median`,
        parley: median(after),
        ratio: median(after) / median(before),
        target: ["<=", 1.5],
        detail: { ...detail, medianBefore: median(before), p95Before: p95(before), p95After: p95(after), p95Ratio: p95(after) / p95(before) },
      },
      { id: "B10", what: `TTFT past a ${context}-token context ÷ the ${BEFORE} turns before, p95`, parley: p95(after), ratio: p95(after) / p95(before), target: ["<=", 1.5] },
    ];
  },
};
