/**
 * Random choices in tests and benchmarks, from a seeded generator so that a failure can be
 * replayed: `PARLEY_TEST_SEED=<seed> bun test <file>`.
 */

/** One seed per process: PARLEY_TEST_SEED, else a fresh one. */
export const testSeed = Bun.env.PARLEY_TEST_SEED ? Number(Bun.env.PARLEY_TEST_SEED) : crypto.getRandomValues(new Uint32Array(1))[0]!;

export interface Random {
  readonly seed: number;
  /** Uniform in [0, 1). */
  next(): number;
  /** A whole number from `min` to `max`, both included. */
  int(min: number, max: number): number;
  /** One of `items`, each as likely. */
  pick<T>(items: readonly T[]): T;
}

/** mulberry32: small, fast, and plenty for picking moments and counts. */
export function seededRandom(seed = testSeed): Random {
  let state = seed >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
  const int = (min: number, max: number) => min + Math.floor(next() * (max - min + 1));
  return { seed, next, int, pick: (items) => items[int(0, items.length - 1)]! };
}

/**
 * A test body given a fresh generator on the process's seed: `test(name, withSeed(async (random) => …))`.
 * A failure names the seed that replays it.
 */
export const withSeed = (body: (random: Random) => Promise<void>) => async (): Promise<void> => {
  const random = seededRandom();
  try {
    await body(random);
  } catch (error) {
    console.error(`failed with random seed ${random.seed}; replay with PARLEY_TEST_SEED=${random.seed}`);
    throw error;
  }
};
