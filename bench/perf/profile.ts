/**
 * B26, where a step's time goes on each server: B8's streams (`--streams`, default 1, 4 and 8), each
 * round read from the kernel's own accounts of the server's threads (/proc/<pid>/task/<tid>/schedstat:
 * time on a CPU and time ready but waiting for one; status: switches that gave the CPU up and
 * switches that took it away), per generated token. The main thread is Parley's JavaScript and
 * llama-server's slot loop (its decodes' own thread). With `--perf`, one round a level and side also
 * runs under Linux `perf record`, and the row's detail holds its samples' share by library (the
 * kernels in libggml-cpu, OpenMP's barriers in libgomp, the OS in the kernel, the runtime) and its
 * hottest symbols.
 */
import { existsSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { median, sum } from "../../test/support/stats";
import { until } from "../../test/support/wait";
import type { TurnTiming } from "./clients";
import { alternating, type Context, compared, type Row, type Scenario, type SideName } from "./harness";
import { userMessage } from "./text";

const PROFILE_LEVELS = [1, 4, 8];
/** Samples a second a CPU under `perf record`: enough for shares of a few seconds' round, little overhead. */
const PERF_HZ = 499;

interface ThreadTimes {
  comm: string;
  cpuNs: number;
  waitNs: number;
  voluntary: number;
  involuntary: number;
}

/** Every thread of `pid` now, by thread id; a thread gone between the listing and its read is left out. */
function threadTimes(pid: number): Map<number, ThreadTimes> {
  const threads = new Map<number, ThreadTimes>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const dir = `/proc/${pid}/task/${tid}`;
      const [cpuNs, waitNs] = readFileSync(`${dir}/schedstat`, "utf8").split(" ").map(Number);
      const status = readFileSync(`${dir}/status`, "utf8");
      const count = (name: string) => Number(status.match(new RegExp(`^${name}:\\s+(\\d+)`, "m"))?.[1] ?? 0);
      threads.set(Number(tid), {
        comm: readFileSync(`${dir}/comm`, "utf8").trim(),
        cpuNs: cpuNs!,
        waitNs: waitNs!,
        voluntary: count("voluntary_ctxt_switches"),
        involuntary: count("nonvoluntary_ctxt_switches"),
      });
    } catch {}
  }
  return threads;
}

/** Per generated token, in microseconds or counts: one round of one side. */
interface Spent {
  tokens: number;
  wallUs: number;
  cpuUs: number;
  mainCpuUs: number;
  waitUs: number;
  voluntary: number;
  involuntary: number;
  /** The busiest threads: name, CPU µs a token. */
  threads: [string, number][];
}

function spent(pid: number, before: Map<number, ThreadTimes>, after: Map<number, ThreadTimes>, turns: readonly TurnTiming[], wallMs: number): Spent {
  const tokens = sum(turns.map((turn) => turn.completionTokens));
  const zero: ThreadTimes = { comm: "", cpuNs: 0, waitNs: 0, voluntary: 0, involuntary: 0 };
  const deltas = [...after].map(([tid, now]) => {
    const then = before.get(tid) ?? zero;
    return {
      tid,
      comm: now.comm,
      cpuNs: now.cpuNs - then.cpuNs,
      waitNs: now.waitNs - then.waitNs,
      voluntary: now.voluntary - then.voluntary,
      involuntary: now.involuntary - then.involuntary,
    };
  });
  const perToken = (total: number) => total / tokens;
  return {
    tokens,
    wallUs: perToken(wallMs * 1000),
    cpuUs: perToken(sum(deltas.map((d) => d.cpuNs)) / 1000),
    mainCpuUs: perToken((deltas.find((d) => d.tid === pid)?.cpuNs ?? 0) / 1000),
    waitUs: perToken(sum(deltas.map((d) => d.waitNs)) / 1000),
    voluntary: perToken(sum(deltas.map((d) => d.voluntary))),
    involuntary: perToken(sum(deltas.map((d) => d.involuntary))),
    threads: deltas
      .filter((d) => d.cpuNs > 0)
      .sort((a, b) => b.cpuNs - a.cpuNs)
      .slice(0, 6)
      .map((d) => [`${d.tid === pid ? "main" : d.comm}`, perToken(d.cpuNs / 1000)]),
  };
}

/** `perf record` on `pid`, once attached, until the returned function is called, which gives the samples' shares. */
async function recording(ctx: Context, pid: number, name: string): Promise<() => Promise<PerfShares>> {
  const file = join(ctx.work, `perf-${name}-${pid}.data`);
  const perf = Bun.spawn(["perf", "record", "-F", String(PERF_HZ), "-p", String(pid), "-o", file], { stdout: "ignore", stderr: "ignore" });
  // Its file has its header once it is attached.
  await until(() => existsSync(file) && statSync(file).size > 0, "perf record to attach", 10_000);
  return async () => {
    perf.kill("SIGINT");
    await perf.exited;
    const shares = { byLibrary: perfReport(file, "dso", 8), hottest: perfReport(file, "dso,sym", 15) };
    rmSync(file, { force: true });
    return shares;
  };
}

interface PerfShares {
  byLibrary: [string, number][];
  hottest: [string, number][];
}

/** `perf report`'s lines: each key (`--sort` columns) with its share of the samples, in percent. */
function perfReport(file: string, sort: string, top: number): [string, number][] {
  const report = Bun.spawnSync(["perf", "report", "-i", file, "--sort", sort, "--stdio", "--percent-limit", "0.5"], { stderr: "ignore" });
  return new TextDecoder()
    .decode(report.stdout)
    .split("\n")
    .filter((line) => /^\s+\d/.test(line))
    .slice(0, top)
    .map((line) => {
      const [share, ...key] = line.trim().split(/\s+/);
      return [key.join(" "), Number.parseFloat(share!)];
    });
}

const prompt = (seed: number) => userMessage(8000 + seed, 50);

export const profile: Scenario = {
  ids: ["B26"],
  async run(ctx) {
    const withPerf = ctx.perfRecord === true;
    const rows: Row[] = [];
    for (const n of ctx.streamLevels ?? PROFILE_LEVELS) {
      const pids = new Map<string, number>();
      const perf: Partial<Record<SideName, PerfShares>> = {};
      const round = (ask: (tag: string, message: string) => Promise<TurnTiming>, tag: string, seed: (i: number) => number) =>
        Promise.all(Array.from({ length: n }, (_, i) => ask(`b26-${tag}-${i}`, prompt(seed(i)))));
      const { runs } = await alternating(
        ctx,
        n,
        (side, server) => {
          pids.set(server.url, server.pid);
          return round(
            (tag, message) => side.ask(server.url, tag, message, ctx.decodeTokens),
            "warm-up",
            (i) => 100 * i,
          );
        },
        async (side, url, r) => {
          const pid = pids.get(url)!;
          const sampled = withPerf && r === 0 ? await recording(ctx, pid, side.name) : undefined;
          const before = threadTimes(pid);
          const started = performance.now();
          const turns = await round(
            (tag, message) => side.ask(url, tag, message, ctx.decodeTokens),
            String(r),
            (i) => 1000 * n + 100 * r + i,
          );
          const measured = spent(pid, before, threadTimes(pid), turns, performance.now() - started);
          if (sampled) perf[side.name] = await sampled();
          return measured;
        },
        ctx.rounds,
      );
      const streams = `${n} stream${n === 1 ? "" : "s"}`;
      const per = (what: string, pick: (s: Spent) => number) =>
        compared({ id: "B26", what: `${what}, ${streams}`, workload: ctx.workload }, runs.parley!.map(pick), runs.llamaServer?.map(pick));
      const cpu = per("CPU µs a generated token, all threads", (s) => s.cpuUs);
      cpu.detail = {
        threads: Object.fromEntries(Object.entries(runs).map(([name, spent]) => [name, spent!.at(-1)!.threads])),
        wallUs: Object.fromEntries(Object.entries(runs).map(([name, spent]) => [name, median(spent!.map((s) => s.wallUs))])),
        rounds: Object.fromEntries(
          Object.entries(runs).map(([name, spent]) => [name, spent!.map(({ tokens, wallUs, cpuUs, mainCpuUs }) => ({ tokens, wallUs, cpuUs, mainCpuUs }))]),
        ),
        ...(withPerf ? { perf } : {}),
      };
      rows.push(
        cpu,
        per("main thread's CPU µs a generated token", (s) => s.mainCpuUs),
        per("µs threads waited for a CPU a generated token", (s) => s.waitUs),
        per("switches giving up the CPU a generated token", (s) => s.voluntary),
        per("switches taking the CPU away a generated token", (s) => s.involuntary),
      );
      for (const [name, spentRuns] of Object.entries(runs))
        console.error(
          `  ${name}, ${streams}: ${median(spentRuns!.map((s) => s.cpuUs)).toFixed(0)} µs CPU a token, main ${median(spentRuns!.map((s) => s.mainCpuUs)).toFixed(0)}`,
        );
    }
    return rows;
  },
};
