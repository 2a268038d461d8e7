import { describe, expect, test } from "bun:test";
import { InvalidRound, intervalOf, pairedInterval } from "../../bench/perf/paired";
import { MIN_PAIRS, verdict } from "../../bench/perf/table";

describe("paired rounds", () => {
  test("each ratio is a round's pair, not a ratio of the sides' medians", () => {
    // The machine slows down over the run: both sides alike, round by round.
    const mine = [100, 90, 80, 70, 60];
    const theirs = [110, 99, 88, 77, 66];
    const interval = pairedInterval(mine, theirs)!;
    expect(interval.pairs).toBe(5);
    for (const value of [interval.median, interval.min, interval.max, interval.lo, interval.hi]) expect(value).toBeCloseTo(100 / 110, 10);
  });

  test("the interval holds the median and lies within the spread", () => {
    const samples = [0.91, 0.97, 1.02, 0.95, 0.99, 1.04, 0.93, 0.98, 1.0];
    const interval = intervalOf(samples);
    expect(interval.median).toBeCloseTo(0.98, 10);
    expect([interval.min, interval.max]).toEqual([0.91, 1.04]);
    expect(interval.lo).toBeLessThanOrEqual(interval.median);
    expect(interval.hi).toBeGreaterThanOrEqual(interval.median);
    expect(interval.lo).toBeGreaterThanOrEqual(interval.min);
    expect(interval.hi).toBeLessThanOrEqual(interval.max);
    expect(interval.hi - interval.lo).toBeGreaterThan(0);
    // Seeded: the same rounds give the same interval in every report.
    expect(intervalOf(samples)).toEqual(interval);
  });

  test("a round that measured no number makes the comparison invalid", () => {
    expect(() => pairedInterval([100, Number.NaN, 98], [101, 99, 97])).toThrow(InvalidRound);
    expect(() => pairedInterval([100, 99], [101, 0])).toThrow(InvalidRound);
    expect(pairedInterval(undefined, [1])).toBeUndefined();
  });

  test("a target is met only when the interval's far end clears it", () => {
    const row = (samples: number[], op: ">=" | "<=", bound: number) => {
      const interval = intervalOf(samples);
      return { id: "B8", what: "x", ratio: interval.median, interval, target: [op, bound] as [">=" | "<=", number] };
    };
    expect(verdict(row([1.0, 1.01, 1.02, 0.99, 1.0], ">=", 0.95))).toBe("met");
    // The median clears it, the interval does not.
    expect(verdict(row([0.8, 0.97, 0.96, 1.1, 0.9, 0.99, 0.85], ">=", 0.95))).toBe("not shown (interval crosses)");
    expect(verdict(row([0.8, 0.82, 0.85, 0.81, 0.84], ">=", 0.95))).toBe("NOT met");
    expect(verdict(row([0.7, 0.72, 0.71, 0.69, 0.7], "<=", 1))).toBe("met");
    expect(verdict(row([1.2], ">=", 0.95))).toBe("point within, unpaired");
    expect(MIN_PAIRS).toBeGreaterThan(1);
  });
});
