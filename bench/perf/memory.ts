/**
 * B7: resident memory beside llama-server's, on the same model and context: each side idle on a
 * fresh server with one sequence and with four, then the peak while four streams run at once.
 * Every reading is split into anonymous pages (heaps, the KV cache, compute buffers) and file
 * pages (the executable, libraries, the model file mapped in), read from /proc.
 */

import { peakResident, type Resident, residentKb } from "../../test/support/stats";
import { type Context, type PerSide, type Row, ratio, type Scenario, type Side, sides, withServer } from "./harness";
import type { Server } from "./procs";
import { userMessage } from "./text";

const STREAMS = 4;
/**
 * How long a fresh server is left alone before its idle reading: readiness comes straight after
 * the engine's warm-up reply, and the readings stop moving within about a second of it. A
 * `--quick` run checks the harness, not the figures, and does not wait.
 */
const SETTLE_MS = 3_000;

const mib = (kb: Resident): Resident => ({ rss: kb.rss / 1024, anon: kb.anon / 1024, file: kb.file / 1024 });

async function idle(server: Server, settleMs: number): Promise<Resident> {
  await Bun.sleep(settleMs);
  return mib(residentKb(server.pid));
}

/** The largest reading while `STREAMS` replies of `tokens` tokens stream at once, each after a ~200-token prompt. */
async function underStreams(side: Side, server: Server, tokens: number): Promise<Resident> {
  const streams = () => Promise.all(Array.from({ length: STREAMS }, (_, i) => side.ask(server.url, `b7-${i}`, userMessage(700 + i, 200), tokens)));
  return mib((await peakResident(server.pid, streams, 50)).peak);
}

interface Readings {
  one: Resident;
  idle: Resident;
  peak: Resident;
}

async function readings(ctx: Context, side: Side): Promise<Readings> {
  const settleMs = ctx.quick ? 0 : SETTLE_MS;
  const one = await withServer(side.start(1), (server) => idle(server, settleMs));
  return withServer(side.start(STREAMS), async (server) => ({
    one,
    idle: await idle(server, settleMs),
    peak: await underStreams(side, server, ctx.decodeTokens),
  }));
}

export const memory: Scenario = {
  ids: ["B7"],
  async run(ctx) {
    const measured: PerSide<Readings> = {};
    for (const side of sides(ctx)) measured[side.name] = await readings(ctx, side);
    const rows = (what: string, pick: (r: Readings) => Resident): Row[] => {
      const [mine, theirs] = [pick(measured.parley!), measured.llamaServer && pick(measured.llamaServer)];
      return [
        { id: "B7", what: `RSS MiB ${what}`, parley: mine.rss, yardstick: theirs?.rss, ratio: ratio(mine.rss, theirs?.rss) },
        { id: "B7", what: `RssAnon MiB ${what}`, parley: mine.anon, yardstick: theirs?.anon },
        { id: "B7", what: `RssFile MiB ${what}`, parley: mine.file, yardstick: theirs?.file },
      ];
    };
    return [
      ...rows("at idle (model loaded, parallel 1)", (r) => r.one),
      ...rows(`at idle (parallel ${STREAMS})`, (r) => r.idle),
      ...rows(`peak, ${STREAMS} streams at once (parallel ${STREAMS})`, (r) => r.peak),
    ];
  },
};
