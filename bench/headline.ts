/**
 * `bun run bench headline --out docs/perf.svg <result.json>...`: the README's chart and the docs'
 * headline table, from committed `bench perf` result files only (issue #64). The chart has one
 * panel per file's B8 (throughput by concurrent streams, named by its workload, model and type),
 * and a separate one for a file's B17/B18 (quoting: speculation on both sides, llama-server at its
 * best setting); under each level, the median ratio of the paired rounds and its 95% interval, and
 * each panel names its file. The table, printed as Markdown, holds every paired row of the files
 * (B1, B3, B8, B9, B14, B17/B18, B25) with its interval, pairs and file.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { basename } from "node:path";
import { parseArgs } from "node:util";
import { type Drawn, drawable, drawChart, type Panel } from "./perf/chart";
import type { Row } from "./perf/harness";
import { verdict } from "./perf/table";

const { values, positionals } = parseArgs({ args: Bun.argv.slice(2), options: { out: { type: "string" } }, allowPositionals: true });
if (values.out === undefined || positionals.length === 0) {
  console.error("usage: bun run bench headline --out docs/perf.svg <bench/results/...-perf-...json>...");
  process.exit(2);
}

interface Report {
  workload?: string;
  invalid?: string;
  preset?: string;
  fileType: string;
  threads: number;
  rounds?: number;
  provenance?: { machine: { cpu: string | null; cores: number } };
  rows: Row[];
}

const figure = (value: number | undefined) => (value === undefined ? "—" : value >= 100 ? value.toFixed(0) : value.toFixed(1));

const WORKLOAD_TITLES: Record<string, string> = { "kernel-parity": "Kernel parity", "fresh-text": "Fresh text" };

const panels: { spec: Panel; data: Drawn }[] = [];
const table: string[] = [];
const machines = new Set<string>();
for (const file of positionals) {
  const report = JSON.parse(readFileSync(file, "utf8")) as Report;
  if (report.invalid !== undefined) throw new Error(`${file} is marked invalid (${report.invalid}): it is no source for a chart`);
  if (report.provenance === undefined) throw new Error(`${file} does not say where it came from (no provenance): run it again`);
  machines.add(`${report.provenance.machine.cpu}, ${report.provenance.machine.cores} cores, ${report.threads} threads`);
  const model = `${report.preset} ${report.fileType}`;
  const note = basename(file);
  for (const row of report.rows) {
    if (row.interval === undefined) continue;
    const i = row.interval;
    table.push(
      `| ${row.workload ?? report.workload} | ${model} | ${row.id} ${row.what} | ${figure(row.parley)} | ${figure(row.yardstick)} | ${i.median.toFixed(2)} | ${i.lo.toFixed(2)}–${i.hi.toFixed(2)} | ${i.min.toFixed(2)}–${i.max.toFixed(2)} | ${i.pairs} | ${verdict(row) || "—"} | \`${note}\` |`,
    );
  }
  const b8 = drawable(report.rows.find((row) => row.id === "B8" && row.detail !== undefined)?.detail);
  if (b8) {
    const title = `${WORKLOAD_TITLES[report.workload ?? ""] ?? report.workload} · ${model}`;
    panels.push({
      spec: { row: "B8", id: `throughput-${report.workload}-${report.preset}`, title, x: "concurrent streams", y: "aggregate tok/s", kind: "bars", note },
      data: b8,
    });
  }
  const quoting = drawable((report.rows.find((row) => row.id === "B17" && row.detail !== undefined)?.detail as { chart?: unknown } | undefined)?.chart);
  if (quoting) {
    const title = `Quoting (speculation on) · ${model}`;
    panels.push({
      spec: { row: "B17", id: `quoting-${report.preset}`, title, x: "streams; llama-server at its best speculation", y: "tok/s", kind: "bars", note },
      data: quoting,
    });
  }
}
if (panels.length === 0) throw new Error("none of the files holds B8 or B17 rows");
writeFileSync(
  values.out,
  drawChart(
    `Parley ÷ llama-server, same model, threads and prompts · ${[...machines].join("; ")}`,
    "Bars: each side's median tok/s. Under each level: the median of paired rounds' ratios, and its bootstrap 95% interval. Each panel names its file in bench/results/.",
    panels,
  ),
);
console.log("| workload | model | measure | Parley | reference | ratio | 95% interval | min–max | pairs | target | file |");
console.log("|---|---|---|---|---|---|---|---|---|---|---|");
for (const line of table) console.log(line);
console.error(`written ${values.out} from ${positionals.length} file${positionals.length === 1 ? "" : "s"}`);
