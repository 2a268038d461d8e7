/**
 * B25: what speculation costs where it cannot pay. Replies of fresh text (sampled, not repeating
 * their context: workload.ts) from two Parley servers alike but for `PARLEY_SPECULATE`, `auto` (the
 * default) against `off`, at 1, 4 and 8 streams, up together and alternating: `auto` must find
 * nothing worth drafting and cost nothing (target: ≥ 0.98 of `off`, the interval's lower end).
 */
import type { TurnTiming } from "./clients";
import { aggregateTps } from "./concurrency";
import { alternate, type Context, compared, freshDb, parley, type Row, type Scenario, sides } from "./harness";
import { userMessage } from "./text";

const LEVELS = [1, 4, 8];

export const freshTextSpeculation: Scenario = {
  ids: ["B25"],
  async run(ctx: Context): Promise<Row[]> {
    const [asker] = sides(ctx, "fresh-text");
    const rows: Row[] = [];
    for (const streams of LEVELS) {
      const contenders = [
        { name: "auto", start: parley(ctx, streams, freshDb(ctx), { PARLEY_SPECULATE: "auto" }) },
        { name: "off", start: parley(ctx, streams, freshDb(ctx), { PARLEY_SPECULATE: "off" }) },
      ];
      const round = (url: string, tag: string): Promise<TurnTiming[]> =>
        Promise.all(
          Array.from({ length: streams }, (_, i) =>
            asker!.ask(url, `b25-${streams}-${tag}-${i}`, userMessage(25_000 + 100 * streams + i, 50), ctx.decodeTokens),
          ),
        );
      const { runs } = await alternate(
        contenders,
        (contender) => contender.start,
        (_contender, server) => round(server.url, "warm"),
        async (_contender, url, run) => aggregateTps(await round(url, String(run))),
        ctx.rounds,
      );
      rows.push(
        compared(
          {
            id: "B25",
            what: `fresh text, aggregate decode tok/s, ${streams} stream${streams === 1 ? "" : "s"}, speculation auto ÷ off`,
            target: [">=", 0.98],
            workload: "fresh-text",
            detail: { rounds: runs },
          },
          runs.auto,
          runs.off,
        ),
      );
    }
    return rows;
  },
};
