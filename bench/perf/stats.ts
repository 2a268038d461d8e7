/** Order statistics for the benchmark's samples. */

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
