/**
 * `bun run bench chart --out docs/perf.svg <result.json>...`: the README's chart, drawn from
 * committed `bench perf` result files only (issue #64): one panel per file's B8 (throughput by
 * concurrent streams, named by its workload, model and type), and a separate panel for a file's
 * B17/B18 (quoting: speculation on both sides, llama-server at its best setting). Under each
 * category, the median ratio of the paired rounds and its 95% interval; each panel names its file.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { basename } from "node:path";
import { parseArgs } from "node:util";
import { type Drawn, drawable, drawChart, type Panel } from "./perf/chart";
import type { Row } from "./perf/harness";

const { values, positionals } = parseArgs({ args: Bun.argv.slice(2), options: { out: { type: "string" } }, allowPositionals: true });
if (values.out === undefined || positionals.length === 0) {
  console.error("usage: bun run bench chart --out docs/perf.svg <bench/results/...-perf-...json>...");
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

const WORKLOAD_TITLES: Record<string, string> = { "kernel-parity": "Kernel parity", "fresh-text": "Fresh text" };

const panels: { spec: Panel; data: Drawn }[] = [];
const machines = new Set<string>();
for (const file of positionals) {
  const report = JSON.parse(readFileSync(file, "utf8")) as Report;
  if (report.invalid !== undefined) throw new Error(`${file} is marked invalid (${report.invalid}): it is no source for a chart`);
  if (report.provenance === undefined) throw new Error(`${file} does not say where it came from (no provenance): run it again`);
  machines.add(`${report.provenance.machine.cpu}, ${report.provenance.machine.cores} cores, ${report.threads} threads`);
  const model = `${report.preset} ${report.fileType}`;
  const note = basename(file);
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
    const title = `Quoting, speculation on both · ${model}`;
    panels.push({
      spec: { row: "B17", id: `quoting-${report.preset}`, title, x: "concurrent streams (llama-server's best setting)", y: "tok/s", kind: "bars", note },
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
console.log(`written ${values.out} from ${positionals.length} file${positionals.length === 1 ? "" : "s"}`);
