// `bench-small`: random weights in the shape of a ~100 M parameter llama model, F16, so that
// a token costs what it would cost with a real model of that size. The weights are noise;
// the output is gibberish by design.

import { DEMO_CORPUS } from "./corpus";
import { replyPieces } from "./demo";
import { llamaGguf, type LlamaHparams, type LlamaTensorSpec } from "./llama";
import { fillXorshift32, hash32, xorshift32 } from "./prng";
import { constant } from "./tensor-data";
import { SPACE, buildVocab, type Vocab } from "./vocab";
import type { GgufFile } from "./writer";

export const BENCH_MODEL_NAME = "parley-bench-small";

export const BENCH_HPARAMS: LlamaHparams = {
  nEmbd: 768,
  nLayer: 12,
  nHead: 12,
  nHeadKv: 12,
  nFf: 2048,
  contextLength: 4096,
  rmsEps: 1e-5,
};
const VOCAB_SIZE = 8192;
const SEED = 0x5eed;
const CHUNK_BYTES = 1 << 22;

const CONSONANTS = "bcdfghjklmnprstvwz";
const VOWELS = "aeiouy";

/** Pseudo-words made of consonant-vowel syllables, with and without the leading ▁. */
function* syntheticPieces(): Generator<string> {
  yield* DEMO_CORPUS.flatMap(replyPieces);
  const next = xorshift32(SEED);
  const pick = (alphabet: string) => alphabet[next() % alphabet.length]!;
  for (;;) {
    let word = next() % 3 === 0 ? "" : SPACE;
    const syllables = 1 + (next() % 3);
    for (let i = 0; i < syllables; i++) word += pick(CONSONANTS) + pick(VOWELS);
    yield word;
  }
}

export function benchVocab(): Vocab {
  return buildVocab(syntheticPieces(), VOCAB_SIZE);
}

/**
 * Random F16 values written as bit patterns, with no float conversion: random sign and
 * mantissa, exponent 5..8, i.e. magnitudes in [2^-10, 2^-6), roughly the scale of a trained
 * model's weights, small enough that activations stay finite through all layers.
 */
function randomHalves(seed: number, count: number): () => Iterable<Uint8Array> {
  return function* () {
    const words = new Uint32Array(CHUNK_BYTES / 4);
    const bytes = new Uint8Array(words.buffer);
    let state = seed;
    for (let left = count * 2; left > 0; left -= bytes.length) {
      state = fillXorshift32(words, state);
      for (let i = 0; i < words.length; i++) {
        const r = words[i]!;
        // Two halves per word: keep sign and mantissa bits, and turn two random bits per
        // half (0..3) into exponent field 5..8 (the addition cannot carry into the sign).
        words[i] = (r & 0x83ff83ff) | ((r & 0x0c000c00) + 0x14001400);
      }
      yield left < bytes.length ? bytes.subarray(0, left) : bytes;
    }
  };
}

export function benchGguf(): GgufFile {
  const vocab = benchVocab();
  const weights = (spec: LlamaTensorSpec) => {
    const count = spec.shape.reduce((a, d) => a * d, 1);
    if (spec.shape.length === 1) return { type: "F32" as const, data: constant(1, count, "F32") };
    const name = `${spec.layer ?? ""}.${spec.kind}`;
    return { type: "F16" as const, data: randomHalves(hash32(name) ^ SEED, count) };
  };
  return llamaGguf({ name: BENCH_MODEL_NAME, hparams: BENCH_HPARAMS, vocab, fileType: 1, weights });
}
