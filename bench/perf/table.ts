/** The benchmark's printed table. */
import type { Row } from "./harness";

const fmt = (value: number | undefined, digits = 2) =>
  value === undefined || Number.isNaN(value) ? "—" : value >= 100 ? value.toFixed(0) : value.toFixed(digits);

/** Fewer pairs than this give an interval too coarse to claim anything by (a smoke run's one). */
export const MIN_PAIRS = 5;

/**
 * A target is met only when the paired rounds' interval clears it at its far end; a row without
 * (enough) paired rounds says where its point falls, and claims nothing.
 */
export function verdict(row: Row): string {
  if (row.target === undefined || row.ratio === undefined || Number.isNaN(row.ratio)) return "";
  const [op, bound] = row.target;
  const clears = (value: number) => (op === ">=" ? value >= bound : value <= bound);
  if (row.interval === undefined || row.interval.pairs < MIN_PAIRS) return clears(row.ratio) ? "point within, unpaired" : "point outside, unpaired";
  if (clears(op === ">=" ? row.interval.lo : row.interval.hi)) return "met";
  return clears(row.ratio) ? "not shown (interval crosses)" : "NOT met";
}

/** A paired ratio's spread as the table and the docs print it: `[lo–hi] 95%, min–max, n pairs`. */
export const spread = (row: Row) =>
  row.interval === undefined
    ? ""
    : `[${fmt(row.interval.lo)}–${fmt(row.interval.hi)}] · ${fmt(row.interval.min)}–${fmt(row.interval.max)} · ${row.interval.pairs}`;

export function printTable(report: {
  command: string;
  model: string;
  fileType: string;
  threads: number;
  runs: number;
  rounds: number;
  workload: string;
  natives: string;
  seconds: number;
  rows: Row[];
}): void {
  console.log(`${report.command}`);
  console.log(
    "reference: llama-server (same model, threads, prompts) for B1-B5, B7-B9 and B14; a bare Bun.serve + bun:sqlite handler for B6; Parley without a quota for B15; B16 is Parley alone; Parley with speculation off for B25",
  );
  console.log(
    `model ${report.model} (${report.fileType}) · workload ${report.workload} · threads ${report.threads} · runs ${report.runs}, paired rounds ${report.rounds} · natives: ${report.natives} · ${report.seconds} s`,
  );
  console.log("ratio: the median of paired rounds' ratios where a row has them; spread: [bootstrap 95% interval] · min–max · pairs");
  const header = ["id", "measure", "parley", "reference", "ratio", "spread", "target", ""];
  const lines = report.rows.map((row) => [
    row.id,
    row.what,
    fmt(row.parley),
    fmt(row.yardstick),
    fmt(row.ratio),
    spread(row),
    row.target ? `${row.target[0] === ">=" ? "≥" : "≤"} ${row.target[1]}` : "report",
    verdict(row),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const render = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
  console.log(render(header));
  console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
  for (const line of lines) console.log(render(line));
}
