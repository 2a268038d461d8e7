/**
 * Parley's compiled natives built behind a server that runs meanwhile on the npm prebuilt: `bun run
 * natives` (or the operator's command) at idle priority (SCHED_IDLE and nice 19, so replies keep the cores), in a
 * process group of its own, so that stopping it stops the compiler too. Its steps are read from its
 * output as the build prints them (`[n/N]`); everything else it prints goes to its own log.
 */
import { join } from "node:path";
import type { Subprocess } from "bun";
import { ROOT } from "./llama-source";

export interface BuildReport {
  state: "building" | "built" | "failed";
  /** The build's last step, e.g. `[120/264]`. */
  step?: string;
  elapsedS: number;
  /** Why it failed. */
  reason?: string;
}

export interface BackgroundBuild {
  /** Whether the build succeeded; false also once stopped. */
  done: Promise<boolean>;
  report(): BuildReport;
  /** Ends the build and what it runs. */
  stop(): void;
  /**
   * Holds the build (its session stopped) or lets it go on: held while replies run, it takes only
   * the time no reply wants, as a compiler even at idle priority slows the replies' threads.
   */
  hold(held: boolean): void;
}

const TAIL_LINES = 20;

/**
 * Starts the build: `command` run by the shell, or `bun run natives` when undefined. `onStep` hears
 * of each step it prints.
 */
export function startBackgroundBuild(command: string | undefined, onStep: (report: BuildReport) => void): BackgroundBuild {
  const started = performance.now();
  const elapsedS = () => Math.round((performance.now() - started) / 1000);
  const argv = command === undefined ? [process.execPath, "run", join(ROOT, "tools/natives.ts")] : ["sh", "-c", command];
  // SCHED_IDLE where chrt is at hand: nice 19 alone still takes time slices from a reply's threads
  // (bun run bench build-cost), an idle-class process only the cores' idle time.
  const [nice, chrt] = [Bun.which("nice"), Bun.which("chrt")];
  const niced = nice === null ? argv : [nice, "-n", "19", ...argv];
  const child: Subprocess<"ignore", "pipe", "pipe"> = Bun.spawn(chrt === null ? niced : [chrt, "--idle", "0", ...niced], {
    cwd: ROOT,
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let report: BuildReport = { state: "building", elapsedS: 0 };
  const tail: string[] = [];
  const read = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    let partial = "";
    for await (const chunk of stream) {
      const lines = (partial + decoder.decode(chunk, { stream: true })).split(/\r?\n|\r/);
      partial = lines.pop()!;
      for (const line of lines.filter(Boolean)) {
        tail.push(line);
        if (tail.length > TAIL_LINES) tail.shift();
        const step = /\[\s*(\d+\/\d+|\d+%)\]/.exec(line)?.[0].replace(/\s+/g, "");
        if (step === undefined) continue;
        report = { state: "building", step, elapsedS: elapsedS() };
        onStep(report);
      }
    }
  };
  /** To the build's session (the compiler's processes, whatever their group), else its group. */
  const signal = (name: "SIGTERM" | "SIGSTOP" | "SIGCONT") => {
    const pkill = Bun.which("pkill");
    if (pkill !== null && Bun.spawnSync([pkill, `-${name.slice(3)}`, "-s", String(child.pid)]).exitCode === 0) return;
    try {
      process.kill(-child.pid, name);
    } catch {}
  };
  let stopped = false;
  const done = Promise.all([child.exited, read(child.stdout), read(child.stderr)]).then(([code]) => {
    const ok = code === 0 && !stopped;
    report = ok
      ? { state: "built", elapsedS: elapsedS() }
      : { state: "failed", elapsedS: elapsedS(), reason: stopped ? "stopped" : `exit ${code}: ${tail.slice(-3).join(" / ")}` };
    return ok;
  });
  return {
    done,
    report: () => (report.state === "building" ? { ...report, elapsedS: elapsedS() } : report),
    stop: () => {
      if (child.exitCode !== null) return;
      stopped = true;
      signal("SIGTERM");
      signal("SIGCONT");
    },
    hold: (held) => {
      if (child.exitCode === null) signal(held ? "SIGSTOP" : "SIGCONT");
    },
  };
}
