/**
 * B11, B12 (issue #34) and B19 (issue #50): many conversations on few sequences, and the same
 * after a restart. B11: 16 conversations of 8 turns, interleaved (every conversation's next turn
 * after all the others'), 4 at a time, on `PARALLEL` sequences against llama-server `-np` the same
 * with its prompt cache (its host-memory cache on, as it ships). B12: 8 conversations of 4 turns
 * on both, both servers stopped (SIGTERM) and started again on the same data, then every
 * conversation's next turn: llama-server's caches are gone; Parley's states are on disk. B19: 64
 * conversations of 4 turns on the same 4 sequences, each turn arriving at a random moment of its
 * round (think times between arrivals drawn from an exponential distribution) and asking for a
 * reply of random length, as many at once as arrive: a service's day, scaled down. The same seeded
 * schedule on both sides.
 */

import { seededRandom, testSeed } from "../../test/support/random";
import { median, quantile, sum } from "../../test/support/stats";
import { llamaServerTurn, type Message, parleyTurn, type TurnTiming } from "./clients";
import { type Context, freshDb, inTurn, parley, type Row, type Scenario, type SideName, yardstick } from "./harness";
import type { Server } from "./procs";
import { userMessage } from "./text";

const PARALLEL = 4;
const REPLY_TOKENS = 32;
/**
 * B19: the mean time between two arrivals, and the replies' lengths. A round's work (64 turns of
 * about 40 reply tokens and 60 prompt tokens) takes bench-small's 4 streams on 2 cores about 15 s:
 * arrivals 400 ms apart keep the servers busy about 60% of the time, as a day's traffic does. At
 * 150 ms (more arriving than either server can serve) the queue's wait decided every TTFT.
 */
const MEAN_GAP_MS = 400;
const REPLY_RANGE = [16, 64] as const;

/** A side's conversations: each one's next turn, the history carried as the side carries it. */
function conversations(side: SideName, seed: number) {
  const histories = new Map<number, Message[]>();
  let turn = 0;
  return {
    async next(url: string, c: number, replyTokens = REPLY_TOKENS): Promise<TurnTiming> {
      const message = userMessage(seed + c * 100 + turn, 26);
      if (side === "parley") return parleyTurn(url, `many-${seed}-${c}`, message, replyTokens);
      const history = histories.get(c) ?? [];
      history.push({ role: "user", content: message });
      const timing = await llamaServerTurn(url, history, replyTokens).catch((error: unknown) => {
        // llama-server closes a kept-alive connection that sat idle while the other side's round
        // ran; the client learns it only by reusing it. The request never reached the server: again.
        if ((error as { code?: string }).code !== "ECONNRESET") throw error;
        return llamaServerTurn(url, history, replyTokens);
      });
      history.push({ role: "assistant", content: timing.reply });
      histories.set(c, history);
      return timing;
    },
    /** The next round's turns are the next turn of every conversation. */
    advance() {
      turn++;
    },
  };
}

type Send = (c: number, replyTokens?: number) => Promise<TurnTiming>;
type Round = { turns: TurnTiming[]; ms: number };

/** Every conversation's next turn, `PARALLEL` at a time; their timings in conversation order, and the round's wall time. */
async function round(count: number, send: Send): Promise<Round> {
  const started = performance.now();
  const turns: TurnTiming[] = new Array(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: PARALLEL }, async () => {
      while (next < count) {
        const c = next++;
        turns[c] = await send(c);
      }
    }),
  );
  return { turns, ms: performance.now() - started };
}

interface Side {
  name: SideName;
  start: () => Promise<Server>;
}

/** Parley on `db` (kept across restarts) and, unless skipped, llama-server. */
function bothSides(ctx: Context, db: string): Side[] {
  const mine: Side = { name: "parley", start: parley(ctx, PARALLEL, db) };
  return ctx.llamaServer === undefined ? [mine] : [mine, { name: "llamaServer", start: yardstick(ctx, PARALLEL) }];
}

async function startAll(sides: Side[]): Promise<Map<SideName, Server>> {
  const servers = new Map<SideName, Server>();
  try {
    for (const side of sides) servers.set(side.name, await side.start());
  } catch (error) {
    await stopAll(servers);
    throw error;
  }
  return servers;
}

const stopAll = async (servers: Map<SideName, Server>) => {
  for (const server of servers.values()) await server.stop();
};

/** A round's turns, each sent at its moment (ms from the round's start) with its reply's length. */
interface Arrival {
  at: number;
  replyTokens: number;
}

/** Every conversation's next turn sent at its arrival, as many at once as have arrived. */
async function arrivals(schedule: readonly Arrival[], send: Send): Promise<Round> {
  const started = performance.now();
  const turns = await Promise.all(
    schedule.map(async ({ at, replyTokens }, c) => {
      await Bun.sleep(at);
      return send(c, replyTokens);
    }),
  );
  return { turns, ms: performance.now() - started };
}

/** Each round's arrivals for `count` conversations: a Poisson process in a random order of the conversations. */
function daySchedule(seed: number, count: number, rounds: number): Arrival[][] {
  const random = seededRandom(seed);
  return Array.from({ length: rounds }, () => {
    const order = Array.from({ length: count }, (_, c) => ({ c, key: random.next() })).sort((a, b) => a.key - b.key);
    const schedule: Arrival[] = new Array(count);
    let at = 0;
    for (const { c } of order) {
      at += -MEAN_GAP_MS * Math.log(1 - random.next());
      schedule[c] = { at, replyTokens: random.int(...REPLY_RANGE) };
    }
    return schedule;
  });
}

/** `turns` rounds of the conversations on every side (`play` sends one), the sides alternating round by round. */
async function interleaved(
  sides: Side[],
  servers: Map<SideName, Server>,
  books: Map<SideName, ReturnType<typeof conversations>>,
  turns: number,
  play: (t: number, send: Send) => Promise<Round>,
  into: Map<SideName, Round[]>,
) {
  for (let t = 0; t < turns; t++) {
    for (const side of inTurn(sides, t)) {
      const book = books.get(side.name)!;
      const send: Send = (c, replyTokens) =>
        book.next(servers.get(side.name)!.url, c, replyTokens).catch((error: unknown) => {
          throw new Error(`${side.name}, conversation ${c}, round ${t + 1}: ${String(error)}`);
        });
      (into.get(side.name) ?? into.set(side.name, []).get(side.name)!).push(await play(t, send));
      book.advance();
    }
  }
}

/** Each side's TTFT figures and throughput over its rounds. */
function figuresOf(measured: Map<SideName, Round[]>, name: SideName) {
  const rounds = measured.get(name);
  if (!rounds) return undefined;
  const ttft = rounds.flatMap((r) => r.turns.map((turn) => turn.ttftMs));
  const tokens = sum(rounds.flatMap((r) => r.turns.map((turn) => turn.completionTokens)));
  return { sum: ttftSum(rounds), p50: median(ttft), p95: quantile(ttft, 0.95), tps: tokens / (sum(rounds.map((r) => r.ms)) / 1000), ttft };
}

type Figures = NonNullable<ReturnType<typeof figuresOf>>;

const QUANTILES = [0.1, 0.5, 0.9, 0.95, 1] as const;

/** The chart's series of both sides' TTFT quantiles. */
const quantileChart = (mine: Figures, theirs: Figures | undefined) => ({
  categories: QUANTILES.map((q) => (q === 1 ? "max" : `p${q * 100}`)),
  parley: QUANTILES.map((q) => quantile(mine.ttft, q)),
  ...(theirs ? { llamaServer: QUANTILES.map((q) => quantile(theirs.ttft, q)) } : {}),
});

/** A row each for Σ TTFT, p95 TTFT and throughput, Parley against llama-server, with their targets. */
function ttftRows(id: string, what: string, mine: Figures, theirs: Figures | undefined, targets: { sum: number; p95?: number }, detail: object = {}): Row[] {
  return [
    {
      id,
      what: `Σ TTFT ms, ${what}`,
      parley: mine.sum,
      yardstick: theirs?.sum,
      ratio: theirs && mine.sum / theirs.sum,
      target: ["<=", targets.sum],
      detail: { ...detail, parley: mine, llamaServer: theirs },
    },
    {
      id,
      what: "p95 TTFT ms, the same",
      parley: mine.p95,
      yardstick: theirs?.p95,
      ratio: theirs && mine.p95 / theirs.p95,
      ...(targets.p95 === undefined ? {} : { target: ["<=", targets.p95] as const }),
    },
    { id, what: "aggregate tok/s, the same", parley: mine.tps, yardstick: theirs?.tps, ratio: theirs && mine.tps / theirs.tps },
  ];
}

/** Rounds of fresh conversations on both sides, started for it and stopped after. */
async function measure(ctx: Context, seed: number, turns: number, play: (t: number, send: Send) => Promise<Round>) {
  const sides = bothSides(ctx, freshDb(ctx));
  const servers = await startAll(sides);
  const measured = new Map<SideName, Round[]>();
  try {
    await interleaved(sides, servers, new Map(sides.map((side) => [side.name, conversations(side.name, seed)])), turns, play, measured);
  } finally {
    await stopAll(servers);
  }
  return { mine: figuresOf(measured, "parley")!, theirs: figuresOf(measured, "llamaServer") };
}

const ttftSum = (rounds: { turns: TurnTiming[] }[]) => sum(rounds.flatMap((r) => r.turns.map((turn) => turn.ttftMs)));

export const manyConversations: Scenario = {
  ids: ["B11", "B12"],
  async run(ctx: Context): Promise<Row[]> {
    const rows: Row[] = [];
    // B11: all turns of many conversations, interleaved.
    {
      const count = ctx.quick ? 4 : 16;
      const turns = ctx.quick ? 2 : 8;
      const { mine, theirs } = await measure(ctx, 30_000, turns, (_, send) => round(count, send));
      const what = `${count} conversations × ${turns} turns, interleaved, ${PARALLEL} at a time on ${PARALLEL} sequences`;
      rows.push(...ttftRows("B11", what, mine, theirs, { sum: 0.7 }));
    }
    // B12: the next turn after both servers restarted.
    {
      const count = ctx.quick ? 4 : 8;
      const before = ctx.quick ? 2 : 4;
      const sides = bothSides(ctx, freshDb(ctx));
      const books = new Map(sides.map((side) => [side.name, conversations(side.name, 40_000)]));
      const warm = new Map<SideName, { turns: TurnTiming[]; ms: number }[]>();
      const servers = await startAll(sides);
      try {
        await interleaved(sides, servers, books, before, (_, send) => round(count, send), warm);
      } finally {
        await stopAll(servers);
      }
      const restarted = await startAll(sides);
      const after = new Map<SideName, { turns: TurnTiming[]; ms: number }[]>();
      try {
        await interleaved(sides, restarted, books, 1, (_, send) => round(count, send), after);
      } finally {
        await stopAll(restarted);
      }
      const mine = ttftSum(after.get("parley")!);
      const theirs = after.has("llamaServer") ? ttftSum(after.get("llamaServer")!) : undefined;
      rows.push({
        id: "B12",
        what: `Σ TTFT ms of the next turn of ${count} conversations after both servers restarted (after turn ${before})`,
        parley: mine,
        yardstick: theirs,
        ratio: theirs && mine / theirs,
        target: ["<=", 0.3],
        detail: {
          parley: after.get("parley")![0]!.turns.map((turn) => turn.ttftMs),
          llamaServer: after.get("llamaServer")?.[0]?.turns.map((turn) => turn.ttftMs),
        },
      });
    }
    return rows;
  },
};

/** B19: a service's day, scaled down. */
export const serviceDay: Scenario = {
  ids: ["B19"],
  async run(ctx: Context): Promise<Row[]> {
    const count = ctx.quick ? 8 : 64;
    const turns = ctx.quick ? 2 : 4;
    const seed = testSeed;
    const schedule = daySchedule(seed, count, turns);
    const { mine, theirs } = await measure(ctx, 50_000, turns, (t, send) => arrivals(schedule[t]!, send));
    const what = `${count} conversations × ${turns} turns on ${PARALLEL} sequences, arriving ${MEAN_GAP_MS} ms apart on average, replies of ${REPLY_RANGE.join("–")} tokens`;
    return ttftRows("B19", what, mine, theirs, { sum: 0.7, p95: 0.8 }, { seed, chart: quantileChart(mine, theirs) });
  },
};
