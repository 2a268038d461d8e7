/**
 * B20, a quantized KV cache (issue #50): `PARLEY_KV_TYPE=q8_0` against llama-server
 * `-ctk q8_0 -ctv q8_0`. Memory: each side's resident anonymous memory idle with 4 sequences less
 * that with 1, per sequence added, in q8_0 and in f16 (target: q8_0's ≤ 0.55 of f16's). Decode:
 * 1 and 4 streams of 128 tokens, both sides in q8_0, up together and alternating (target ≥ 0.97).
 */
import { median, residentKb } from "../../test/support/stats";
import type { TurnTiming } from "./clients";
import { aggregateTps } from "./concurrency";
import { alternate, type Context, freshDb, parley, type Row, ratio, type Scenario, sides, withServer } from "./harness";
import { type Server, startLlamaServer } from "./procs";
import { userMessage } from "./text";

const SEQUENCES = 4;
/** Readiness comes after the warm-up reply; the reading settles within about a second. */
const SETTLE_MS = 2_000;

type KvType = "f16" | "q8_0";

const parleyOf = (ctx: Context, parallel: number, kvType: KvType) => parley(ctx, parallel, freshDb(ctx), { PARLEY_KV_TYPE: kvType });
const llamaServerOf = (ctx: Context, parallel: number, kvType: KvType) => () =>
  startLlamaServer({
    binary: ctx.llamaServer!,
    model: ctx.model,
    threads: ctx.threads,
    parallel,
    contextSize: ctx.contextSize,
    flags: ["-ctk", kvType, "-ctv", kvType, "-fa", "on"],
  });

/** MiB of anonymous memory (heaps, the KV cache, compute buffers) a fresh server holds idle. */
async function idleAnonMib(start: () => Promise<Server>, quick: boolean): Promise<number> {
  return withServer(start, async (server) => {
    await Bun.sleep(quick ? 0 : SETTLE_MS);
    return residentKb(server.pid).anon / 1024;
  });
}

/** Memory a sequence adds: idle with `SEQUENCES` less idle with one, per sequence added. */
async function perSequenceMib(start: (parallel: number) => () => Promise<Server>, quick: boolean): Promise<number> {
  return ((await idleAnonMib(start(SEQUENCES), quick)) - (await idleAnonMib(start(1), quick))) / (SEQUENCES - 1);
}

export const kvType: Scenario = {
  ids: ["B20"],
  async run(ctx: Context): Promise<Row[]> {
    const mine = {
      f16: await perSequenceMib((n) => parleyOf(ctx, n, "f16"), ctx.quick),
      q8_0: await perSequenceMib((n) => parleyOf(ctx, n, "q8_0"), ctx.quick),
    };
    const theirs = ctx.llamaServer ? await perSequenceMib((n) => llamaServerOf(ctx, n, "q8_0"), ctx.quick) : undefined;
    const rows: Row[] = [
      {
        id: "B20",
        what: `MiB a sequence adds (${ctx.contextSize} tokens), q8_0 ÷ f16`,
        parley: mine.q8_0,
        yardstick: theirs,
        ratio: mine.q8_0 / mine.f16,
        target: ["<=", 0.55],
        detail: { parley: mine, llamaServerQ8: theirs },
      },
    ];
    for (const streams of [1, SEQUENCES]) {
      const [me, them] = sides(ctx);
      const contenders = [
        { name: "parley" as const, side: me!, start: parleyOf(ctx, streams, "q8_0") },
        ...(them ? [{ name: "llamaServer" as const, side: them, start: llamaServerOf(ctx, streams, "q8_0") }] : []),
      ];
      const round = (contender: (typeof contenders)[number], url: string, tag: string): Promise<TurnTiming[]> =>
        Promise.all(Array.from({ length: streams }, (_, i) => contender.side.ask(url, `b20-${tag}-${i}`, userMessage(9100 + i, 50), ctx.decodeTokens)));
      const { runs } = await alternate(
        contenders,
        (contender) => contender.start,
        (contender, server) => round(contender, server.url, "warm"),
        async (contender, url, run) => aggregateTps(await round(contender, url, String(run))),
        ctx.runs * 3,
      );
      const [tps, reference] = [median(runs.parley!), runs.llamaServer && median(runs.llamaServer)];
      rows.push({
        id: "B20",
        what: `aggregate decode tok/s in q8_0, ${streams} stream${streams > 1 ? "s" : ""}`,
        parley: tps,
        yardstick: reference,
        ratio: ratio(tps, reference),
        target: [">=", 0.97],
        detail: { parley: runs.parley, llamaServer: runs.llamaServer },
      });
    }
    return rows;
  },
};
