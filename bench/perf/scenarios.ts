/** B1-B6, each a function of the shared context returning table rows; B7 is in memory.ts, B8/B9 in concurrency.ts, B10 in overflow.ts, B11/B12/B19 in many.ts, B13 in system-prompt.ts, B14 in structured.ts, B15 in quotas.ts, B16 in switch.ts, B17/B18 in speculation.ts, B20 in kv-type.ts, B21/B22 in retrieval.ts, B23/B24 in vision.ts, B25 in fresh-text.ts, B26 in profile.ts. */
import { copyFileSync, existsSync, mkdirSync, readdirSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { median, medianSeries, sum } from "../../test/support/stats";
import { llamaServerTurn, type Message, parleyTurn, type TurnTiming } from "./clients";
import { aggregateTps, concurrencySweep, ttftWhileBusy } from "./concurrency";
import { freshTextSpeculation } from "./fresh-text";
import {
  alternate,
  alternating,
  type Context,
  compared,
  freshDb,
  inTurn,
  type PerSide,
  parley,
  type Scenario,
  type Side,
  type SideName,
  sides,
  withServer,
  yardstick,
} from "./harness";
import { ensureHistoryDb, FULL_HISTORY, HISTORY_USER_KEY, type HistoryShape } from "./history";
import { kvType } from "./kv-type";
import { type LoadResult, load } from "./load";
import { manyConversations, serviceDay } from "./many";
import { memory } from "./memory";
import { contextOverflow } from "./overflow";
import { type Server, startBaseline } from "./procs";
import { profile } from "./profile";
import { quotaCost } from "./quotas";
import { retrieval } from "./retrieval";
import { speculation } from "./speculation";
import { structuredOutput } from "./structured";
import { modelSwitch } from "./switch";
import { sharedSystemPrompt } from "./system-prompt";
import { userMessage } from "./text";
import { vision } from "./vision";

/** A conversation of `ctx.turns` turns on llama-server: the client carries the history. */
async function llamaConversation(url: string, ctx: Context, seed: number): Promise<TurnTiming[]> {
  const messages: Message[] = [];
  const timings: TurnTiming[] = [];
  for (let t = 1; t <= ctx.turns; t++) {
    messages.push({ role: "user", content: userMessage(seed * 1000 + t) });
    const turn = await llamaServerTurn(url, messages, ctx.replyTokens);
    messages.push({ role: "assistant", content: turn.reply });
    timings.push(turn);
  }
  return timings;
}

async function parleyConversation(url: string, ctx: Context, seed: number, id: string): Promise<TurnTiming[]> {
  const timings: TurnTiming[] = [];
  for (let t = 1; t <= ctx.turns; t++) timings.push(await parleyTurn(url, id, userMessage(seed * 1000 + t), ctx.replyTokens));
  return timings;
}

/**
 * B1 decode rate and B2/B3 turn costs. B1's servers are up together, each warmed by one reply
 * (a service's steady state, as B8's), then their rounds alternate. Each 20-turn conversation runs
 * on a fresh server, the sides in turn.
 */
const singleConversation: Scenario = {
  ids: ["B1", "B2", "B3"],
  async run(ctx) {
    const b1 = await alternating(
      ctx,
      1,
      (side, server) => side.ask(server.url, "b1-warm", userMessage(899, 200), ctx.decodeTokens),
      (side, url, r) => side.ask(url, `b1-${r}`, userMessage(900 + r, 200), ctx.decodeTokens),
      ctx.rounds,
    );
    const conversation = (side: Side, url: string, r: number) =>
      side.name === "parley" ? parleyConversation(url, ctx, r + 1, `b2-${r}`) : llamaConversation(url, ctx, r + 1);
    const b2: PerSide<TurnTiming[][]> = {};
    for (let r = 0; r < ctx.runs; r++) {
      // Each on a fresh server, so one that dies mid-conversation costs only that conversation's
      // repetition (see withServer).
      for (const side of inTurn(sides(ctx), r)) (b2[side.name] ??= []).push(await withServer(side.start(1), (server) => conversation(side, server.url, r), 6));
    }
    const summary = (name: SideName) => {
      const [replies, conversations] = [b1.runs[name], b2[name]];
      if (replies === undefined || conversations === undefined) return undefined;
      return {
        decodeTps: replies.map((t) => t.decodeTps),
        ttft: medianSeries(conversations.map((c) => c.map((t) => t.ttftMs))),
        cached: conversations[0]!.map((t) => t.cachedTokens ?? 0),
        sums: conversations.map((c) => sum(c.map((t) => t.ttftMs))),
      };
    };
    const mine = summary("parley")!;
    const theirs = summary("llamaServer");
    const last = ctx.turns - 1;
    return [
      compared({ id: "B1", what: "decode tok/s, streamed over HTTP", target: [">=", 0.95], workload: ctx.workload }, mine.decodeTps, theirs?.decodeTps),
      {
        id: "B2",
        what: `TTFT ms, turn ${ctx.turns} ÷ turn 1`,
        parley: mine.ttft[last],
        yardstick: theirs?.ttft[last],
        ratio: mine.ttft[last]! / mine.ttft[0]!,
        target: ["<=", 1.3],
        detail: { parley: mine.ttft, llamaServer: theirs?.ttft, parleyCachedTokens: mine.cached, llamaServerCachedTokens: theirs?.cached },
      },
      compared({ id: "B3", what: `sum of TTFT ms over ${ctx.turns} turns`, target: ["<=", 1.0] }, mine.sums, theirs?.sums),
    ];
  },
};

function dirMiB(dir: string): number {
  if (!existsSync(dir)) return 0;
  let bytes = 0;
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (entry.isFile()) bytes += statSync(join(entry.parentPath, entry.name)).size;
  }
  return bytes / 2 ** 20;
}

/** B4: two conversations on one sequence, so each turn finds the other conversation's cache. */
const evicted: Scenario = {
  ids: ["B4"],
  async run(ctx) {
    const db = freshDb(ctx);
    const mine = await withServer(parley(ctx, 1, db), async (server) => {
      const runs: number[][] = [];
      for (let r = 0; r < ctx.runs; r++) {
        const ttft: number[] = [];
        for (let t = 1; t <= ctx.turns; t++) {
          ttft.push((await parleyTurn(server.url, `b4-a-${r}`, userMessage(5000 + r * 100 + t), ctx.replyTokens)).ttftMs);
          await parleyTurn(server.url, `b4-b-${r}`, userMessage(7000 + r * 100 + t), ctx.replyTokens);
        }
        runs.push(ttft);
      }
      return medianSeries(runs);
    });
    const last = ctx.turns - 1;
    return [
      {
        id: "B4",
        what: `TTFT ms turn ${ctx.turns} ÷ turn 1, evicted every turn`,
        parley: mine[last],
        ratio: mine[last]! / mine[0]!,
        target: ["<=", 1.5],
        detail: { parley: mine },
      },
      { id: "B4", what: "KV state directory MiB after B4", parley: dirMiB(join(db, "..", "kv")) },
    ];
  },
};

/** B5: four conversations at once through one context, against one alone on the same server. */
const parallel: Scenario = {
  ids: ["B5"],
  async run(ctx) {
    const side = (start: () => Promise<Server>, turn: (url: string, seed: number) => Promise<TurnTiming>) =>
      withServer(start, async (server) => {
        const alone: number[] = [];
        const together: number[] = [];
        for (let r = 0; r < ctx.runs; r++) {
          alone.push((await turn(server.url, 100 * r)).decodeTps);
          together.push(aggregateTps(await Promise.all([1, 2, 3, 4].map((i) => turn(server.url, 100 * r + i)))));
        }
        return { alone: median(alone), together: median(together) };
      });
    const prompt = (seed: number) => userMessage(300 + seed, 50);
    const mine = await side(parley(ctx, 4), (url, seed) => parleyTurn(url, `b5-${seed}`, prompt(seed), ctx.decodeTokens));
    const theirs = ctx.llamaServer
      ? await side(yardstick(ctx, 4), (url, seed) => llamaServerTurn(url, [{ role: "user", content: prompt(seed) }], ctx.decodeTokens))
      : undefined;
    return [
      {
        id: "B5",
        what: "aggregate decode tok/s, 4 at once ÷ 1 alone",
        parley: mine.together,
        yardstick: theirs?.together,
        ratio: mine.together / mine.alone,
        target: [">=", 1.0],
        detail: { parleyAlone: mine.alone, llamaServerAlone: theirs?.alone },
      },
    ];
  },
};

/** B6: the listing on a big history, against a bare Bun.serve + bun:sqlite handler, both up together and their rounds alternating. */
const history: Scenario = {
  ids: ["B6"],
  async run(ctx) {
    const shape: HistoryShape = ctx.quick ? { total: 20_000, mine: 4_000, perConversation: 100 } : FULL_HISTORY;
    const cached = await ensureHistoryDb(ctx.cacheDir, shape);
    const seconds = ctx.quick ? 0.5 : 5;
    const concurrency = 8;
    const deepPage = ctx.quick ? 100 : 5000;
    const headers = { Authorization: `Bearer ${HISTORY_USER_KEY}` };
    const path = (page: number) => `/api/v1.0/chat/messages?rows_per_page=20&current_page=${page}&sort_by=created_at:desc`;
    // A copy per run: Parley migrates and writes to its database; the bare server only reads it.
    const db = freshDb(ctx);
    mkdirSync(dirname(db), { recursive: true });
    copyFileSync(cached, db);
    const servers = [
      { name: "parley", start: parley(ctx, 1, db) },
      { name: "bare", start: () => startBaseline(db) },
    ] as const;
    const { runs } = await alternate(
      servers,
      (server) => server.start,
      (_server, { url }) => load(`${url}${path(1)}`, headers, concurrency, seconds / 5),
      async (_server, url) => ({
        first: await load(`${url}${path(1)}`, headers, concurrency, seconds),
        deep: await load(`${url}${path(deepPage)}`, headers, concurrency, seconds),
      }),
      ctx.runs,
    );
    const summary = (of: { first: LoadResult; deep: LoadResult }[]) => {
      const middle = (pick: (run: { first: LoadResult; deep: LoadResult }) => number) => median(of.map(pick));
      return {
        rps: middle((run) => run.first.rps),
        p50Ms: middle((run) => run.first.p50Ms),
        p99Ms: middle((run) => run.first.p99Ms),
        deepP50Ms: middle((run) => run.deep.p50Ms),
        deepP99Ms: middle((run) => run.deep.p99Ms),
        rounds: of,
      };
    };
    const [mine, bare] = [summary(runs.parley!), summary(runs.bare!)];
    return [
      {
        id: "B6",
        what: "listing page 1 req/s (vs bare Bun.serve+bun:sqlite)",
        parley: mine.rps,
        yardstick: bare.rps,
        ratio: mine.rps / bare.rps,
        target: [">=", 0.9],
        detail: { parley: mine, bare, deepPage, concurrency, seconds, shape },
      },
      { id: "B6", what: "page 1 p50 ms", parley: mine.p50Ms, yardstick: bare.p50Ms },
      { id: "B6", what: "page 1 p99 ms", parley: mine.p99Ms, yardstick: bare.p99Ms },
      { id: "B6", what: `page ${deepPage} p50 ms`, parley: mine.deepP50Ms, yardstick: bare.deepP50Ms },
      { id: "B6", what: `page ${deepPage} p99 ms`, parley: mine.deepP99Ms, yardstick: bare.deepP99Ms },
    ];
  },
};

export const scenarios: Scenario[] = [
  singleConversation,
  evicted,
  parallel,
  memory,
  history,
  concurrencySweep,
  ttftWhileBusy,
  structuredOutput,
  contextOverflow,
  manyConversations,
  serviceDay,
  sharedSystemPrompt,
  quotaCost,
  modelSwitch,
  speculation,
  freshTextSpeculation,
  profile,
  kvType,
  retrieval,
  vision,
];
