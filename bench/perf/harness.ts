/**
 * What a scenario is given and returns, and the servers it measures: each scenario starts its
 * own (fresh database, the parallelism it needs) and stops it before the next one.
 */
import { join } from "node:path";
import type { Installed } from "../../test/support/binary";
import { median } from "../../test/support/stats";
import { type ExtraFields, llamaServerTurn, type OnFirstToken, parleyTurn, type TurnTiming } from "./clients";
import { type Interval, pairedInterval } from "./paired";
import { type Server, startLlamaServer, startParley } from "./procs";
import { type Workload, workloadEnv, workloadSampling } from "./workload";

export interface Context {
  quick: boolean;
  model: string;
  /** Scratch directory for this run's databases and KV files. */
  work: string;
  /** Kept between runs: the generated history database. */
  cacheDir: string;
  runs: number;
  threads: number;
  contextSize: number;
  turns: number;
  replyTokens: number;
  decodeTokens: number;
  /** Path to llama-server, or undefined to skip the yardstick. */
  llamaServer: string | undefined;
  /** Parley as a built executable installed alone (`--binary`), else from this checkout's source. */
  installed?: Installed;
  /** Set for every Parley server (`--parley-env`). */
  parleyEnv?: Record<string, string>;
  /** More flags for every llama-server (`--llama-flag`), e.g. `-ngl 99` on a GPU. */
  llamaFlags?: string[];
  /** B8's stream counts (`--streams`); default STREAM_LEVELS. */
  streamLevels?: number[];
  /** What B1, B8, B9 and B14 reply (`--workload`): see workload.ts. */
  workload: Workload;
  /** Paired rounds of B1, B8, B9 and B25 a level (`--rounds`). */
  rounds: number;
  /** B26 runs a round a level under `perf record` (`--perf`). */
  perfRecord?: boolean;
}

export interface Row {
  id: string;
  what: string;
  parley?: number;
  yardstick?: number;
  /** Where a row has paired rounds, their median ratio: the same as `interval.median`. */
  ratio?: number;
  /** The paired rounds' spread: a target is met only when the interval's far end clears it. */
  interval?: Interval;
  target?: [">=" | "<=", number];
  /** The replies measured, where the row compares servers on replies. */
  workload?: Workload;
  detail?: unknown;
}

export interface Scenario {
  ids: string[];
  run(ctx: Context): Promise<Row[]>;
}

let dbCounter = 0;
export const freshDb = (ctx: Context) => join(ctx.work, `parley-${++dbCounter}`, "parley.db");

/**
 * Runs `use` on a fresh server, stopped afterwards. A server that drops the connection mid-run is
 * started afresh and the whole run repeated (at most twice more): llama-server built from this
 * llama.cpp source has been seen to exit without a word in the middle of the 20-turn conversation,
 * and a half-measured series is worth nothing.
 */
export async function withServer<T>(start: () => Promise<Server>, use: (server: Server) => Promise<T>, attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const server = await start();
    try {
      return await use(server);
    } catch (error) {
      if (attempt >= attempts || !isConnectionLost(error)) throw error;
      console.error(
        `  ${server.name} at ${server.url} dropped the connection (${(error as { code?: string }).code}); starting it again, attempt ${attempt + 1} of ${attempts}`,
      );
    } finally {
      await server.stop();
    }
  }
}

function isConnectionLost(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  return code === "ECONNRESET" || code === "ConnectionRefused" || code === "ECONNREFUSED";
}

export const parley =
  (ctx: Context, parallel: number, db = freshDb(ctx), env?: Record<string, string>) =>
  () =>
    startParley({
      model: ctx.model,
      db,
      threads: ctx.threads,
      parallel,
      contextSize: ctx.contextSize,
      env: { ...ctx.parleyEnv, ...env },
      installed: ctx.installed,
    });

export const yardstick = (ctx: Context, parallel: number) => () =>
  startLlamaServer({ binary: ctx.llamaServer!, model: ctx.model, threads: ctx.threads, parallel, contextSize: ctx.contextSize, flags: ctx.llamaFlags ?? [] });

export const ratio = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined ? undefined : a / b);

/**
 * A row comparing two sides' paired rounds (`mine[r]` beside `theirs[r]`): each side's median, and
 * the ratio as the median of the pairs' ratios with its interval. `lowerIsBetter` rows (times) keep
 * the ratio mine ÷ theirs all the same.
 */
export function compared(
  row: Omit<Row, "parley" | "yardstick" | "ratio" | "interval">,
  mine: readonly number[] | undefined,
  theirs: readonly number[] | undefined,
): Row {
  const interval = pairedInterval(mine, theirs);
  return {
    ...row,
    parley: mine && median(mine),
    yardstick: theirs && median(theirs),
    ...(interval ? { ratio: interval.median, interval } : {}),
  };
}

/** The key of a side's figures in a row's detail (and the chart's series). */
export type SideName = "parley" | "llamaServer";

/** A server under test and its single-turn request, so a scenario runs the same steps on both. */
export interface Side {
  name: SideName;
  start(parallel: number): () => Promise<Server>;
  /** One streamed reply to `message`: in a new conversation named `tag` on Parley, a one-message chat on llama-server. */
  ask(url: string, tag: string, message: string, maxTokens: number, onFirstToken?: OnFirstToken, extra?: ExtraFields): Promise<TurnTiming>;
}

/**
 * Parley, then llama-server unless this run skips the yardstick, both replying as `workload` asks
 * (default the run's): Parley's servers set as it says, each request sampled as it says.
 */
export function sides(ctx: Context, workload = ctx.workload): Side[] {
  const mine: Side = {
    name: "parley",
    start: (n) => parley(ctx, n, freshDb(ctx), workloadEnv(workload)),
    ask: (url, tag, message, maxTokens, onFirstToken, extra) =>
      parleyTurn(url, tag, message, maxTokens, onFirstToken, { ...workloadSampling(workload, tag), ...extra }),
  };
  if (ctx.llamaServer === undefined) return [mine];
  const theirs: Side = {
    name: "llamaServer",
    start: (n) => yardstick(ctx, n),
    ask: (url, tag, message, maxTokens, onFirstToken, extra) =>
      llamaServerTurn(url, [{ role: "user", content: message }], maxTokens, onFirstToken, { ...workloadSampling(workload, tag), ...extra }),
  };
  return [mine, theirs];
}

export type PerSide<T> = Partial<Record<SideName, T>>;

/** The sides in run `run`'s order: each run the reverse of the one before (ABBA). */
export const inTurn = <S>(all: readonly S[], run: number): S[] => (run % 2 === 0 ? [...all] : [...all].reverse());

/**
 * One fresh server per side with `parallel` slots, all up together, each first given `warmUp`,
 * unmeasured: for B8 and B9 one round (graph allocation, cold caches, and for Parley the JIT
 * compiling its per-token path over the first few hundred tokens: a service's steady state, not its
 * first seconds); for B1 nothing, so its runs start cold. The runs then
 * alternate between the sides (`alternate`). `rounds` (default the context's runs) is how many
 * runs each side gets. Returns what each side's warm-up gave, and its runs in order.
 */
export const alternating = <W, T>(
  ctx: Context,
  parallel: number,
  warmUp: (side: Side, server: Server) => Promise<W>,
  measure: (side: Side, url: string, run: number) => Promise<T>,
  rounds = ctx.runs,
): Promise<{ warm: PerSide<W>; runs: PerSide<T[]> }> => alternate(sides(ctx), (side) => side.start(parallel), warmUp, measure, rounds);

/**
 * The servers `start` gives each contender (a side, or any other server under comparison), all up
 * together, each first given `warmUp`; then `rounds` runs of `measure` each, alternating between
 * them in ABBA order (`inTurn`), so a change in the machine's speed, ±15% within minutes on this
 * VM, hits all alike. A contender waits idle while another is measured. Returns what each one's
 * warm-up gave, and its runs in order, by name.
 */
export async function alternate<S extends { name: string }, W, T>(
  contenders: readonly S[],
  start: (contender: S) => () => Promise<Server>,
  warmUp: (contender: S, server: Server) => Promise<W>,
  measure: (contender: S, url: string, run: number) => Promise<T>,
  rounds: number,
): Promise<{ warm: Partial<Record<S["name"], W>>; runs: Partial<Record<S["name"], T[]>> }> {
  type Up = readonly { contender: S; url: string }[];
  const runs = async (servers: Up) => {
    // Fresh for every attempt: withServer repeats the whole of it after a dropped connection.
    const measured: Partial<Record<S["name"], T[]>> = {};
    for (let r = 0; r < rounds; r++) {
      for (const { contender, url } of inTurn(servers, r)) (measured[contender.name as S["name"]] ??= []).push(await measure(contender, url, r));
    }
    return measured;
  };
  const up = async (
    servers: Up,
    warm: Partial<Record<S["name"], W>>,
  ): Promise<{ warm: Partial<Record<S["name"], W>>; runs: Partial<Record<S["name"], T[]>> }> => {
    const contender = contenders[servers.length];
    if (contender === undefined) return { warm, runs: await runs(servers) };
    return withServer(start(contender), async (server) =>
      up([...servers, { contender, url: server.url }], { ...warm, [contender.name]: await warmUp(contender, server) }),
    );
  };
  return up([], {});
}
