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

/**
 * A running process's resident memory in KiB, from /proc: all of it, and its split into anonymous
 * pages (heaps, the KV cache) and file pages (the executable, libraries, a model file mapped in).
 */
export interface Resident {
  rss: number;
  anon: number;
  file: number;
}

export function residentKb(pid: number): Resident {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1]);
  return { rss: field("VmRSS"), anon: field("RssAnon"), file: field("RssFile") };
}

export const rssKb = (pid: number) => residentKb(pid).rss;

/**
 * Runs `work` while sampling a process's resident memory every `everyMs`; returns its result and
 * the sample with the largest RSS. A process that has gone is not sampled: what it was doing says so.
 */
export async function peakResident<T>(pid: number, work: () => Promise<T>, everyMs = 100): Promise<{ result: T; peak: Resident }> {
  let peak: Resident = { rss: 0, anon: 0, file: 0 };
  const sample = () => {
    try {
      const now = residentKb(pid);
      if (now.rss > peak.rss) peak = now;
    } catch {
      // Gone.
    }
  };
  sample();
  const timer = setInterval(sample, everyMs);
  try {
    const result = await work();
    sample();
    return { result, peak };
  } finally {
    clearInterval(timer);
  }
}
