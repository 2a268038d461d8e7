/**
 * `bun run bench startup [--runs N] [--binary <path>]`: the single executable's size, its time from
 * exec to the first 200 from /readyz (first start with a fresh natives directory, so unpacking is
 * included, then later starts on the same data), and its RSS once idle, all with the demo model.
 * Builds the executable first unless `--binary` names one. Writes `.bench/startup-<time>.json`.
 * Targets: size ≤ 120 MB, later starts ≤ 0.5 s.
 */
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { type Installed, installAlone } from "../test/support/binary";
import { type ChildServer, startServer } from "../test/support/process";
import { median, rssKb } from "../test/support/stats";

const ROOT = join(import.meta.dir, "..");
const OUT = join(ROOT, ".bench");
const FIRST_RUNS = 3;
const IDLE_MS = 2000;

const { values } = parseArgs({ args: Bun.argv.slice(2), options: { runs: { type: "string", default: "7" }, binary: { type: "string" } } });
const runs = Number(values.runs);
if (!Number.isInteger(runs) || runs < 5) throw new Error("--runs must be an integer ≥ 5 (the figure is a median)");

const buildDir = mkdtempSync("/tmp/parley-bench-build-");
let binary = values.binary;
if (binary === undefined) {
  binary = join(buildDir, "parley");
  const build = Bun.spawnSync([process.execPath, "run", join(ROOT, "src/build/build.ts"), "--outfile", binary], { stdout: "inherit", stderr: "inherit" });
  if (build.exitCode !== 0) process.exit(1);
}

const ms = (x: number) => Math.round(x);
/**
 * CPU time (user + system, all threads) the process has used, in ms. Read right after /readyz turns
 * 200 it shows what a start costs with the machine's other load taken out of the wall time.
 */
const cpuMs = async (pid: number) => {
  const fields = (await Bun.file(`/proc/${pid}/stat`).text()).split(") ")[1]!.split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
};
/** USER_HZ; 100 on every Linux this runs on (`getconf CLK_TCK`). */
const CLOCK_TICKS = 100;
const installs: Installed[] = [];
const install = (label: string) => {
  installs.push(installAlone(binary!, label));
  return installs.at(-1)!;
};

/** Polls /readyz every 5 ms, so that the time to ready is measured to within that. */
const startServe = (installed: Installed) => startServer({ installed, timeoutMs: 20_000, pollMs: 5 });

try {
  // First starts: each in a fresh directory, so also with an empty natives cache (under its HOME).
  const first: ChildServer[] = [];
  for (let i = 0; i < FIRST_RUNS; i++) {
    first.push(await startServe(install("bench-first")));
    await first.at(-1)!.stop();
  }

  // Later starts: one directory, natives already unpacked, database and demo model already there.
  const installed = install("bench-later");
  await (await startServe(installed)).stop();
  const later: ChildServer[] = [];
  const laterCpuMs: number[] = [];
  let idleRssKb = 0;
  for (let i = 0; i < runs; i++) {
    const serving = await startServe(installed);
    laterCpuMs.push(await cpuMs(serving.pid));
    later.push(serving);
    if (i === runs - 1) {
      await Bun.sleep(IDLE_MS);
      idleRssKb = rssKb(serving.pid);
    }
    await serving.stop();
  }

  const sizeBytes = statSync(binary).size;
  const report = {
    when: new Date().toISOString(),
    command: `bun run bench startup ${Bun.argv.slice(2).join(" ")}`.trim(),
    cpus: navigator.hardwareConcurrency,
    loadavg: (await Bun.file("/proc/loadavg").text()).split(" ").slice(0, 3).map(Number),
    binary: { sizeBytes, sizeMB: +(sizeBytes / 1e6).toFixed(1), sizeMiB: +(sizeBytes / 2 ** 20).toFixed(1) },
    firstStart: { runs: FIRST_RUNS, readyMs: first.map((s) => ms(s.readyMs)), medianReadyMs: ms(median(first.map((s) => s.readyMs))) },
    laterStart: {
      runs,
      readyMs: later.map((s) => ms(s.readyMs)),
      medianReadyMs: ms(median(later.map((s) => s.readyMs))),
      medianListeningMs: ms(median(later.map((s) => s.listeningMs))),
      medianCpuMs: ms(median(laterCpuMs)),
    },
    idleRssMB: +((idleRssKb * 1024) / 1e6).toFixed(1),
  };
  mkdirSync(OUT, { recursive: true });
  const file = join(OUT, `startup-${report.when.replace(/[:.]/g, "-")}.json`);
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);

  const rows: [string, string, string][] = [
    ["binary size", `${report.binary.sizeMB} MB (${report.binary.sizeMiB} MiB)`, "≤ 120 MB"],
    [`first start → /readyz 200 (median of ${FIRST_RUNS}, unpacking natives)`, `${report.firstStart.medianReadyMs} ms`, ""],
    [`later start → /readyz 200 (median of ${runs})`, `${report.laterStart.medianReadyMs} ms`, "≤ 500 ms"],
    ["  of which until listening (model loads after)", `${report.laterStart.medianListeningMs} ms`, ""],
    ["  CPU time used by then (user + system)", `${report.laterStart.medianCpuMs} ms`, ""],
    [`RSS idle (${IDLE_MS / 1000} s after ready)`, `${report.idleRssMB} MB`, ""],
  ];
  for (const [what, value, target] of rows) console.log(`${what.padEnd(62)}${value.padStart(22)}  ${target}`);
  console.log(`load average ${report.loadavg.join(" ")} on ${report.cpus} CPUs; written ${file.slice(ROOT.length + 1)}`);
} finally {
  for (const dir of [buildDir, ...installs.map((installed) => installed.dir)]) rmSync(dir, { recursive: true, force: true });
}
