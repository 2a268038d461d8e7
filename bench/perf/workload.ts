/**
 * What the compared replies are, named for what they measure, each row labelled with it and never
 * mixed (issue #64):
 * - `kernel-parity`: greedy replies, speculation off on both sides: the same tokens through the
 *   same kernels, so the figure is the serving around them. bench-small's greedy replies cycle
 *   (random weights), which any drafting would turn into a speed no real text gets.
 * - `fresh-text`: sampled replies that do not repeat (temperature 1, llama-server's default
 *   top-k/top-p/min-p sent to both, one seed a stream, the same to both servers), each server at
 *   its defaults: Parley's `PARLEY_SPECULATE=auto` against llama-server's none. What a user gets.
 * - `quoting`: replies that repeat their context (B17/B18), where speculation pays.
 */
import type { ExtraFields } from "./clients";

export const WORKLOADS = ["kernel-parity", "fresh-text"] as const;
export type Workload = (typeof WORKLOADS)[number] | "quoting";

/** What a workload sets on every Parley server it measures. */
export const workloadEnv = (workload: Workload): Record<string, string> => (workload === "kernel-parity" ? { PARLEY_SPECULATE: "off" } : {});

/**
 * The sampling a request of this workload asks for, by its tag (the same tag on both servers, so
 * the same seed): greedy is the clients' default.
 */
export function workloadSampling(workload: Workload, tag: string): ExtraFields {
  if (workload !== "fresh-text") return {};
  return { temperature: 1, top_k: 40, top_p: 0.95, min_p: 0.05, seed: Number(Bun.hash.crc32(tag)) };
}
