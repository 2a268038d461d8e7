/** The benchmark's printed table. */
import type { Row } from "./harness";

const fmt = (value: number | undefined, digits = 2) =>
  value === undefined || Number.isNaN(value) ? "—" : value >= 100 ? value.toFixed(0) : value.toFixed(digits);

export function verdict(row: Row): string {
  if (row.target === undefined || row.ratio === undefined || Number.isNaN(row.ratio)) return "";
  const [op, bound] = row.target;
  return (op === ">=" ? row.ratio >= bound : row.ratio <= bound) ? "met" : "NOT met";
}

export function printTable(report: {
  command: string;
  model: string;
  fileType: string;
  threads: number;
  runs: number;
  natives: string;
  seconds: number;
  rows: Row[];
}): void {
  console.log(`${report.command}`);
  console.log(
    "reference: llama-server (same model, threads, prompts) for B1-B5, B7-B9 and B14; a bare Bun.serve + bun:sqlite handler for B6; Parley without a quota for B15; B16 is Parley alone",
  );
  console.log(
    `model ${report.model} (${report.fileType}) · threads ${report.threads} · runs ${report.runs} (medians) · natives: ${report.natives} · ${report.seconds} s`,
  );
  const header = ["id", "measure", "parley", "reference", "ratio", "target", ""];
  const lines = report.rows.map((row) => [
    row.id,
    row.what,
    fmt(row.parley),
    fmt(row.yardstick),
    fmt(row.ratio),
    row.target ? `${row.target[0] === ">=" ? "≥" : "≤"} ${row.target[1]}` : "report",
    verdict(row),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const render = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
  console.log(render(header));
  console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
  for (const line of lines) console.log(render(line));
}
