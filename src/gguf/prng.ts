// Small seeded generators: the same seed gives the same model on every machine.

/** xorshift32 (Marsaglia). A zero seed, which would stick at zero, is replaced. */
export function xorshift32(seed: number): () => number {
  let x = seed >>> 0 || 0x9e3779b9;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>>= 0);
  };
}

/**
 * Fills `out` with the xorshift32 sequence following `state` and returns the new state.
 * The step is inlined: calling a closure per number made the 200 MB bench model ten times
 * slower to generate.
 */
export function fillXorshift32(out: Uint32Array, state: number): number {
  let x = state >>> 0 || 0x9e3779b9;
  for (let i = 0; i < out.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x;
  }
  return x >>> 0;
}

/** FNV-1a, to derive an independent seed per tensor from its name. */
export function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(text)) h = Math.imul(h ^ byte, 0x01000193);
  return h >>> 0;
}
