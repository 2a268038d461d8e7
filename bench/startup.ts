/**
 * `bun run bench startup [--runs N] [--binary <path>] [--model <file.gguf>] [--prebuilt-natives]`: the single executable's
 * size, its time from exec to the first 200 from /readyz (first starts in fresh directories, so
 * unpacking is included, then later starts on the same data), and its RSS once idle. Builds the
 * executable first unless `--binary` names one (`--prebuilt-natives` is passed to the builds).
 * Writes `.bench/startup-<time>.json`.
 * Without `--model` it serves the demo model it writes itself. With `--model`, two ways of shipping
 * that file are measured alike: the executable with the file in its models directory, and one built
 * carrying it (`--embed-model`, whose build time is reported), which unpacks it into its data
 * directory on a first start; each with the page cache its files hold after that first start, which
 * starts with none of them cached (as after a reboot; evicted with posix_fadvise).
 * Targets (demo): size ≤ 120 MB, later starts ≤ 0.5 s.
 */
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { type Installed, installAlone } from "../test/support/binary";
import { type ChildServer, startServer } from "../test/support/process";
import { median, type Resident, residentKb } from "../test/support/stats";

const ROOT = join(import.meta.dir, "..");
const OUT = join(ROOT, ".bench");
const FIRST_RUNS = 3;
const IDLE_MS = 2000;

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    runs: { type: "string", default: "7" },
    binary: { type: "string" },
    model: { type: "string" },
    "prebuilt-natives": { type: "boolean", default: false },
  },
});
const runs = Number(values.runs);
if (!Number.isInteger(runs) || runs < 5) throw new Error("--runs must be an integer ≥ 5 (the figure is a median)");
const model = values.model === undefined ? undefined : resolve(values.model);

const buildDir = mkdtempSync("/tmp/parley-bench-build-");
/** Builds an executable into the build directory; returns it, the build's seconds and its peak RSS. */
function build(name: string, ...args: string[]): { binary: string; buildS: number; buildPeakMB: number } {
  const binary = join(buildDir, name);
  const started = performance.now();
  const built = Bun.spawnSync(
    [process.execPath, "run", join(ROOT, "src/build/build.ts"), "--outfile", binary, ...(values["prebuilt-natives"] ? ["--prebuilt-natives"] : []), ...args],
    {
      stdout: "inherit",
      stderr: "inherit",
    },
  );
  if (built.exitCode !== 0) process.exit(1);
  return { binary, buildS: +((performance.now() - started) / 1000).toFixed(1), buildPeakMB: +(built.resourceUsage.maxRSS / 1e6).toFixed(0) };
}

const ms = (x: number) => Math.round(x);
const mb = (kb: number) => +((kb * 1024) / 1e6).toFixed(1);
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

/** Polls /readyz every 5 ms, so that the time to ready is measured to within that. A large model loads for seconds. */
const startServe = (installed: Installed) => startServer({ installed, timeoutMs: 120_000, pollMs: 5 });

/** RSS split into anonymous and file pages, once the server has been idle a while. */
async function idleResident(server: ChildServer): Promise<{ rssMB: number; anonMB: number; fileMB: number }> {
  await Bun.sleep(IDLE_MS);
  const { rss, anon, file }: Resident = residentKb(server.pid);
  return { rssMB: mb(rss), anonMB: mb(anon), fileMB: mb(file) };
}

/** MB of each file held in the page cache (util-linux's fincore), by the file's name. */
function pageCacheMB(files: string[]): Record<string, number> {
  const out = Bun.spawnSync(["fincore", "--bytes", "--noheadings", "--output", "RES,FILE", ...files]).stdout.toString();
  return Object.fromEntries(
    out
      .trim()
      .split("\n")
      .filter((line) => line !== "")
      .map((line) => {
        const [res, file] = line.trim().split(/\s+/);
        return [basename(file!), +(Number(res) / 1e6).toFixed(1)];
      }),
  );
}

/** Drops `files` from the page cache (written back first): Python's os.posix_fadvise, which Bun lacks. */
function evict(files: string[]): void {
  const script =
    "import os,sys\nfor p in sys.argv[1:]:\n fd=os.open(p,os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)";
  if (Bun.spawnSync(["python3", "-c", script, ...files]).exitCode !== 0)
    throw new Error(`cannot evict ${files.join(", ")} from the page cache (python3 needed)`);
}

/**
 * One way of shipping: first starts each in a fresh directory (`prepare` puts what it needs beside
 * the executable), then later starts in one directory on the same data.
 */
async function measure(binary: string, label: string, prepare: (installed: Installed) => void, cached: (installed: Installed) => string[]) {
  const install = () => {
    const installed = installAlone(binary, label);
    installs.push(installed);
    prepare(installed);
    return installed;
  };
  const first: ChildServer[] = [];
  let firstIdle = { rssMB: 0, anonMB: 0, fileMB: 0 };
  let firstPageCacheMB: Record<string, number> = {};
  for (let i = 0; i < FIRST_RUNS; i++) {
    const installed = install();
    evict(cached(installed).filter((file) => Bun.file(file).size > 0));
    first.push(await startServe(installed));
    if (i === FIRST_RUNS - 1) {
      firstIdle = await idleResident(first.at(-1)!);
      firstPageCacheMB = pageCacheMB(cached(installed));
    }
    await first.at(-1)!.stop();
  }

  const installed = install();
  await (await startServe(installed)).stop();
  const later: ChildServer[] = [];
  const laterCpuMs: number[] = [];
  let laterIdle = firstIdle;
  for (let i = 0; i < runs; i++) {
    const serving = await startServe(installed);
    laterCpuMs.push(await cpuMs(serving.pid));
    later.push(serving);
    if (i === runs - 1) laterIdle = await idleResident(serving);
    await serving.stop();
  }
  const sizeBytes = statSync(binary).size;
  return {
    binary: { sizeBytes, sizeMB: +(sizeBytes / 1e6).toFixed(1), sizeMiB: +(sizeBytes / 2 ** 20).toFixed(1) },
    firstStart: {
      runs: FIRST_RUNS,
      readyMs: first.map((s) => ms(s.readyMs)),
      medianReadyMs: ms(median(first.map((s) => s.readyMs))),
      idle: firstIdle,
      pageCacheMB: firstPageCacheMB,
    },
    laterStart: {
      runs,
      readyMs: later.map((s) => ms(s.readyMs)),
      medianReadyMs: ms(median(later.map((s) => s.readyMs))),
      medianListeningMs: ms(median(later.map((s) => s.listeningMs))),
      medianCpuMs: ms(median(laterCpuMs)),
      idle: laterIdle,
    },
  };
}
type Measured = Awaited<ReturnType<typeof measure>>;

try {
  const plain: { binary: string; buildS?: number; buildPeakMB?: number } = values.binary === undefined ? build("parley") : { binary: values.binary };
  const built = (made: typeof plain) => ({ buildS: made.buildS, buildPeakMB: made.buildPeakMB });
  const shipped: Record<string, Measured & ReturnType<typeof built>> = {};
  if (model === undefined) {
    shipped.demo = {
      ...(await measure(
        plain.binary,
        "bench",
        () => {},
        (installed) => [installed.binary],
      )),
      ...built(plain),
    };
  } else {
    const inModels = (installed: Installed) => join(installed.dir, "models", basename(model));
    shipped["models directory"] = {
      ...(await measure(
        plain.binary,
        "bench-dir",
        (installed) => {
          mkdirSync(join(installed.dir, "models"));
          copyFileSync(model, inModels(installed));
          // Named: a model Parley generated (demo, bench-1b) is never the directory's default.
          installed.env.PARLEY_MODEL = join("models", basename(model));
        },
        (installed) => [installed.binary, inModels(installed)],
      )),
      ...built(plain),
    };
    const carrying = build("parley-carrying", "--embed-model", model);
    const sha256 = new Bun.CryptoHasher("sha256");
    for await (const chunk of Bun.file(model).stream()) sha256.update(chunk);
    const unpacked = join("data", "carried", sha256.digest("hex"), basename(model));
    shipped.carried = {
      ...(await measure(
        carrying.binary,
        "bench-carried",
        () => {},
        (installed) => [installed.binary, join(installed.dir, unpacked)],
      )),
      ...built(carrying),
    };
  }

  const report = {
    when: new Date().toISOString(),
    command: `bun run bench startup ${Bun.argv.slice(2).join(" ")}`.trim(),
    commit: Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"], { cwd: ROOT }).stdout.toString().trim(),
    cpus: navigator.hardwareConcurrency,
    loadavg: (await Bun.file("/proc/loadavg").text()).split(" ").slice(0, 3).map(Number),
    ...(model === undefined ? {} : { model: { file: basename(model), sizeMB: +(statSync(model).size / 1e6).toFixed(1) } }),
    shipped,
  };
  mkdirSync(OUT, { recursive: true });
  const file = join(OUT, `startup-${report.when.replace(/[:.]/g, "-")}.json`);
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);

  for (const [how, m] of Object.entries(shipped)) {
    const rows: [string, string][] = [
      ["executable size", `${m.binary.sizeMB} MB (${m.binary.sizeMiB} MiB)`],
      ...(m.buildS === undefined ? [] : ([["build time (peak RSS)", `${m.buildS} s (${m.buildPeakMB} MB)`]] as [string, string][])),
      [`first start → /readyz 200 (median of ${FIRST_RUNS}, unpacking)`, `${m.firstStart.medianReadyMs} ms`],
      [`  RSS idle after it (anon + file)`, `${m.firstStart.idle.rssMB} MB (${m.firstStart.idle.anonMB} + ${m.firstStart.idle.fileMB})`],
      [
        "  page cache held then",
        Object.entries(m.firstStart.pageCacheMB)
          .map(([name, held]) => `${name} ${held} MB`)
          .join(", "),
      ],
      [`later start → /readyz 200 (median of ${runs})`, `${m.laterStart.medianReadyMs} ms`],
      ["  of which until listening (model loads after)", `${m.laterStart.medianListeningMs} ms`],
      ["  CPU time used by then (user + system)", `${m.laterStart.medianCpuMs} ms`],
      [
        `  RSS idle (${IDLE_MS / 1000} s after ready; anon + file)`,
        `${m.laterStart.idle.rssMB} MB (${m.laterStart.idle.anonMB} + ${m.laterStart.idle.fileMB})`,
      ],
    ];
    console.log(`\n${how}`);
    for (const [what, value] of rows) console.log(`  ${what.padEnd(60)}${value}`);
  }
  console.log(`load average ${report.loadavg.join(" ")} on ${report.cpus} CPUs; written ${file.slice(ROOT.length + 1)}`);
} finally {
  for (const dir of [buildDir, ...installs.map((installed) => installed.dir)]) rmSync(dir, { recursive: true, force: true });
}
