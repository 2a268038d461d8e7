/** Order statistics of measured samples, and a process's memory. */
import { readFileSync } from "node:fs";

/** The `q`-quantile (0 to 1) of `samples`, interpolating between neighbours. */
export function quantile(samples: readonly number[], q: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

export const median = (samples: readonly number[]) => quantile(samples, 0.5);

/** Element-wise median of equally long series (one per run). */
export function medianSeries(runs: readonly (readonly number[])[]): number[] {
  const length = Math.min(...runs.map((run) => run.length));
  return Array.from({ length }, (_, i) => median(runs.map((run) => run[i]!)));
}

export const sum = (values: readonly number[]) => values.reduce((a, b) => a + b, 0);

/** Resident set size of a running process, in KiB, from /proc. */
export function rssKb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1]);
}
