/**
 * `bun run bench perf [--quick] [--preset bench-small|bench-1b] [--type f16|q8_0|q4_0] [--runs N]
 * [--threads N] [--only B1,B2,...] [--streams 1,8,32] [--chart docs/perf.svg] [--llama-server PATH]
 * [--llama-flag FLAG ...] [--binary dist/parley] [--parley-env NAME=VALUE ...]
 * [--workload kernel-parity|fresh-text] [--rounds N] [--perf]`: B1-B26, Parley
 * against llama-server (built from the same llama.cpp source) on the same model, threads, prompts
 * and token counts. Prints a table and writes `.bench/perf-<time>.json` and its chart
 * `.bench/perf-<time>.svg`, copied to `--chart` when given (a chart in the repository changes only
 * when asked to). The model is bench-small in `--type` (default f16), as real users run quantized
 * files too. `--quick` is a smoke run: the tiny demo model, one run, few turns, no yardstick build.
 * `--llama-server` uses a llama-server built elsewhere (another checkout's `.bench/`). `--binary`
 * serves Parley from a built executable, installed alone as an operator would, instead of the source.
 * `--parley-env` (repeatable) sets a variable for every Parley server, to measure a setting, and
 * `--llama-flag` (repeatable) adds a flag to every llama-server, e.g. `--llama-flag=-ngl=99` on a GPU
 * (`=` inside splits it into the flag and its value). `--streams` names B8's stream counts.
 * `--preset bench-1b` serves the GPU benchmark's model (bench/gpu/run.sh). `--workload` names
 * what B1, B8, B9 and B14 reply (default kernel parity; bench/perf/workload.ts), `--rounds` how many
 * paired rounds B1, B8, B9, B14, B25 and B26 take a level (default 9), `--perf` runs a round of
 * B26's under Linux `perf record` (bench/perf/profile.ts). The JSON records where it came
 * from (bench/perf/provenance.ts); a scenario that failed, or a round that measured no number,
 * marks the whole file `invalid`.
 */
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { parseArgs } from "node:util";
import { PRESET_FILE_TYPES, presetFileName, presetFileType, writePresetModel } from "../src/gguf/presets";
import { compiledNativesDir } from "../src/natives/compiled";
import { NODE_LLAMA_CPP_VERSION } from "../src/natives/version";
import { installAlone } from "../test/support/binary";
import { perfChart } from "./perf/chart";
import type { Context, Row } from "./perf/harness";
import { provenance, recordedPath } from "./perf/provenance";
import { scenarios } from "./perf/scenarios";
import { printTable } from "./perf/table";
import { WORKLOADS, type Workload } from "./perf/workload";
import { buildLlamaServer } from "./perf/yardstick";

const ROOT = join(import.meta.dir, "..");
const OUT = join(ROOT, ".bench");

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    quick: { type: "boolean", default: false },
    runs: { type: "string" },
    threads: { type: "string" },
    only: { type: "string" },
    type: { type: "string" },
    chart: { type: "string" },
    "llama-server": { type: "string" },
    "no-yardstick": { type: "boolean", default: false },
    binary: { type: "string" },
    "parley-env": { type: "string", multiple: true, default: [] },
    "llama-flag": { type: "string", multiple: true, default: [] },
    streams: { type: "string" },
    preset: { type: "string" },
    workload: { type: "string", default: "kernel-parity" },
    rounds: { type: "string" },
    perf: { type: "boolean", default: false },
  },
});
if (!(WORKLOADS as readonly string[]).includes(values.workload!)) {
  console.error(`--workload: expected ${WORKLOADS.join(" or ")} (got "${values.workload}")`);
  process.exit(2);
}
const workload = values.workload as Workload;
const llamaFlags = values["llama-flag"]!.flatMap((flag) => flag.split("="));
const streamLevels = values.streams?.split(",").map(Number);
if (streamLevels?.some((n) => !Number.isInteger(n) || n < 1)) {
  console.error(`--streams: expected stream counts like 1,8,32 (got "${values.streams}")`);
  process.exit(2);
}
const BENCH_PRESETS = ["bench-small", "bench-1b"] as const;
if (values.preset !== undefined && !(BENCH_PRESETS as readonly string[]).includes(values.preset)) {
  console.error(`--preset: expected ${BENCH_PRESETS.join(" or ")} (got "${values.preset}")`);
  process.exit(2);
}
const parleyEnv: Record<string, string> = {};
for (const setting of values["parley-env"]!) {
  const [name, ...value] = setting.split("=");
  if (!name?.startsWith("PARLEY_") || value.length === 0) {
    console.error(`--parley-env: expected PARLEY_NAME=VALUE (got "${setting}")`);
    process.exit(2);
  }
  parleyEnv[name] = value.join("=");
}
const quick = values.quick!;
mkdirSync(OUT, { recursive: true });

const preset = quick ? "demo" : ((values.preset as (typeof BENCH_PRESETS)[number] | undefined) ?? "bench-small");
const fileType = presetFileType(preset, values.type);
if (fileType === undefined) {
  console.error(`--type: the ${preset} model${quick ? " (--quick)" : ""} is written as ${PRESET_FILE_TYPES[preset].join(", ").toLowerCase()}`);
  process.exit(2);
}
const model = join(OUT, presetFileName(preset, preset, fileType));
if (!existsSync(model)) await writePresetModel(preset, model, fileType);

const work = mkdtempSync(join(OUT, "run-"));
const ctx: Context = {
  quick,
  model,
  work,
  cacheDir: OUT,
  runs: Number(values.runs ?? (quick ? 1 : 3)),
  threads: Number(values.threads ?? (quick ? 1 : navigator.hardwareConcurrency)),
  contextSize: 4096,
  turns: quick ? 3 : 20,
  replyTokens: quick ? 16 : 64,
  decodeTokens: quick ? 16 : 128,
  llamaServer: quick || values["no-yardstick"] ? undefined : (values["llama-server"] ?? (await buildLlamaServer())),
  installed: values.binary === undefined ? undefined : installAlone(values.binary, "bench"),
  parleyEnv,
  llamaFlags,
  workload,
  rounds: Number(values.rounds ?? (quick ? 1 : 9)),
  perfRecord: values.perf!,
  ...(streamLevels === undefined ? {} : { streamLevels }),
};

if (!Number.isInteger(ctx.rounds) || ctx.rounds < 1) {
  console.error(`--rounds: expected a whole number of rounds (got "${values.rounds}")`);
  process.exit(2);
}

const only = values.only?.split(",");
const rows: Row[] = [];
// Why the file must not be quoted, where something failed: its figures stay for diagnosis.
const invalid: string[] = [];
const started = performance.now();
try {
  for (const scenario of scenarios) {
    if (only && !scenario.ids.some((id) => only.includes(id))) continue;
    console.error(`running ${scenario.ids.join("/")} ...`);
    try {
      rows.push(...(await scenario.run(ctx)));
    } catch (error) {
      invalid.push(`${scenario.ids.join("/")}: ${error instanceof Error ? error.message : String(error)}`);
      console.error(`  ${scenario.ids.join("/")} failed, the run is invalid: ${error}`);
    }
  }
} finally {
  rmSync(work, { recursive: true, force: true });
  if (ctx.installed) rmSync(ctx.installed.dir, { recursive: true, force: true });
}

// Asked only of a checkout: a run on the executable (bundled for the GPU machine) has no natives' sources.
const localNatives = ctx.installed ? "" : join(compiledNativesDir(NODE_LLAMA_CPP_VERSION), "linux-x64");
const recorded = await provenance({
  model,
  llamaServer: ctx.llamaServer,
  binary: values.binary,
  nativesDir: parleyEnv.PARLEY_NATIVES_DIR,
  localCompiled: ctx.installed ? undefined : localNatives,
});
const report = {
  when: new Date().toISOString(),
  command: `bun run bench perf ${Bun.argv.slice(2).map(recordedPath).join(" ")}`.trim(),
  ...(invalid.length > 0 ? { invalid: invalid.join("; ") } : {}),
  workload,
  model: recordedPath(model),
  preset,
  fileType,
  threads: ctx.threads,
  runs: ctx.runs,
  rounds: ctx.rounds,
  ...(llamaFlags.length > 0 ? { llamaFlags } : {}),
  ...(Object.keys(parleyEnv).length > 0 ? { parleyEnv } : {}),
  parley: ctx.installed ? `${recordedPath(values.binary!)} (installed alone)` : "bun src/cli.ts (this checkout)",
  natives: recorded.natives.kind,
  provenance: recorded,
  seconds: Math.round((performance.now() - started) / 1000),
  rows,
};
const stem = join(OUT, `perf-${report.when.replace(/[:.]/g, "-")}`);
writeFileSync(`${stem}.json`, `${JSON.stringify(report, null, 2)}\n`);
const written = [relative(ROOT, `${stem}.json`)];
const chart = perfChart(
  `Parley vs llama-server · ${preset} (${fileType}) · ${report.threads} thread${report.threads === 1 ? "" : "s"}`,
  `${report.when.slice(0, 16).replace("T", " ")} UTC · ${workload} · medians of ${report.rounds} paired round${report.rounds === 1 ? "" : "s"} · ${ctx.decodeTokens} new tokens a stream · natives: ${report.natives}`,
  rows,
);
if (chart !== undefined) {
  writeFileSync(`${stem}.svg`, chart);
  written.push(relative(ROOT, `${stem}.svg`));
  if (values.chart !== undefined) {
    mkdirSync(dirname(values.chart), { recursive: true });
    copyFileSync(`${stem}.svg`, values.chart);
    written.push(values.chart);
  }
}
printTable(report);
console.log("");
for (const file of written) console.log(`written ${file}`);
if (invalid.length > 0) {
  console.error(`INVALID: ${report.invalid}`);
  process.exitCode = 1;
}
