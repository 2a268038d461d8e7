/**
 * A ratio a reader can trust: the two sides' rounds paired as they ran (round r of one beside round
 * r of the other, adjacent in the ABBA order `alternate` keeps), one ratio a pair, and their median
 * with its spread and a bootstrap 95% interval. This VM's speed drifts by ±15% within minutes, so a
 * ratio of two medians taken apart can cross a target that the pairs do not.
 */

import { seededRandom } from "../../test/support/random";
import { quantile } from "../../test/support/stats";

export interface Interval {
  pairs: number;
  median: number;
  min: number;
  max: number;
  /** The bootstrap 95% interval of the median: the 2.5th and 97.5th percentiles of resampled medians. */
  lo: number;
  hi: number;
}

/** Resamples per interval; with 5 to 30 pairs the percentiles settle well before this. */
const RESAMPLES = 4000;
/** Fixed, so the same rounds give the same interval in every report (the seed is part of the method). */
export const BOOTSTRAP_SEED = 64;

/**
 * `of(a[r], b[r])` for each round r both sides have; undefined where there is no pair. A pair with a
 * value that is not a finite number (a failed round, a reply without tokens) makes the interval
 * invalid: thrown, so a run never averages over it.
 */
export function pairedInterval(a: readonly number[] | undefined, b: readonly number[] | undefined, of = (x: number, y: number) => x / y): Interval | undefined {
  if (a === undefined || b === undefined) return undefined;
  const length = Math.min(a.length, b.length);
  if (length === 0) return undefined;
  const ratios = Array.from({ length }, (_, r) => of(a[r]!, b[r]!));
  const bad = ratios.findIndex((value) => !Number.isFinite(value));
  if (bad >= 0) throw new InvalidRound(`round ${bad} gave ${a[bad]} against ${b[bad]}`);
  return intervalOf(ratios);
}

/** Median, spread and bootstrap interval of samples that are each already a ratio. */
export function intervalOf(samples: readonly number[]): Interval {
  const random = seededRandom(BOOTSTRAP_SEED);
  const medians = Array.from({ length: RESAMPLES }, () =>
    quantile(
      Array.from(samples, () => samples[random.int(0, samples.length - 1)]!),
      0.5,
    ),
  );
  return {
    pairs: samples.length,
    median: quantile(samples, 0.5),
    min: Math.min(...samples),
    max: Math.max(...samples),
    lo: quantile(medians, 0.025),
    hi: quantile(medians, 0.975),
  };
}

/** A measured round that is no number: the run that holds it is marked invalid, never averaged. */
export class InvalidRound extends Error {}
