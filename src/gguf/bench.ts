// `bench-small`: random weights in the shape of a ~100 M parameter llama model, F16 (or
// quantized to Q8_0 or Q4_0), so that a token costs what it would cost with a real model of
// that size and type. The weights are noise; the output is gibberish by design.

import { CHATML_TEMPLATE } from "./chatml";
import { PLAIN_REPLIES } from "./corpus";
import { replyPieces } from "./demo";
import { type FileType, tensorTypeFor } from "./file-type";
import { type LlamaHparams, type LlamaTensorSpec, llamaGguf } from "./llama";
import { fillXorshift32, hash32, xorshift32 } from "./prng";
import { constant, encoded } from "./tensor-data";
import { chatmlTokenizer } from "./tokenizer";
import { gguf } from "./values";
import { buildVocab, SPACE, type Vocab } from "./vocab";
import type { GgufFile } from "./writer";

export const BENCH_MODEL_NAME = "parley-bench-small";

/** Marks a model whose weights are noise: served when asked for by name, never chosen as the default. */
export const RANDOM_WEIGHTS_KEY = "parley.random_weights";

export const BENCH_HPARAMS: LlamaHparams = {
  nEmbd: 768,
  nLayer: 12,
  nHead: 12,
  nHeadKv: 12,
  nFf: 2048,
  contextLength: 4096,
  rmsEps: 1e-5,
};
/** A draft model for bench-small (PARLEY_DRAFT_MODEL): its vocabulary, an eighth of its weights' reads per token. */
export const BENCH_DRAFT_HPARAMS: LlamaHparams = {
  nEmbd: 256,
  nLayer: 4,
  nHead: 4,
  nHeadKv: 4,
  nFf: 768,
  contextLength: 4096,
  rmsEps: 1e-5,
};
/**
 * `bench-1b` (the GPU benchmark's model): bench-small's vocabulary in TinyLlama 1.1B's shape
 * (grouped-query attention, 8 query heads a KV head), about 1 B parameters: a GPU's decode is
 * bound by reading the weights, which a 100 M model would leave to launch overheads.
 */
export const BENCH_1B_HPARAMS: LlamaHparams = {
  nEmbd: 2048,
  nLayer: 22,
  nHead: 32,
  nHeadKv: 4,
  nFf: 5632,
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
  // The plain replies only: the vocabulary stays the one its benchmark results were measured with.
  yield* PLAIN_REPLIES.flatMap(replyPieces);
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
 * Random F16 values made as bit patterns, with no float conversion: random sign and
 * mantissa, exponent 5..8, i.e. magnitudes in [2^-10, 2^-6), roughly the scale of a trained
 * model's weights, small enough that activations stay finite through all layers. Every file
 * type draws the same values, so a quantized bench model is its F16 model quantized.
 */
export function randomHalves(seed: number, count: number): () => Iterable<Float16Array> {
  return function* () {
    const words = new Uint32Array(CHUNK_BYTES / 4);
    const halves = new Float16Array(words.buffer);
    let state = seed;
    for (let left = count; left > 0; left -= halves.length) {
      state = fillXorshift32(words, state);
      for (let i = 0; i < words.length; i++) {
        const r = words[i]!;
        // Two halves per word: keep sign and mantissa bits, and turn two random bits per
        // half (0..3) into exponent field 5..8 (the addition cannot carry into the sign).
        words[i] = (r & 0x83ff83ff) | ((r & 0x0c000c00) + 0x14001400);
      }
      yield left < halves.length ? halves.subarray(0, left) : halves;
    }
  };
}

/** The file types bench-small is written in; F16 is the default. */
export const BENCH_FILE_TYPES = ["F16", "Q8_0", "Q4_0"] as const satisfies readonly FileType[];
export type BenchFileType = (typeof BENCH_FILE_TYPES)[number];

export function benchGguf(fileType: BenchFileType = "F16", { name, hparams } = { name: BENCH_MODEL_NAME, hparams: BENCH_HPARAMS }): GgufFile {
  const vocab = benchVocab();
  const weights = (spec: LlamaTensorSpec) => {
    const count = spec.shape.reduce((a, d) => a * d, 1);
    const type = tensorTypeFor(fileType, spec);
    if (spec.shape.length === 1) return { type, data: constant(1, count, type) };
    const name = `${spec.layer ?? ""}.${spec.kind}`;
    return { type, data: encoded(randomHalves(hash32(name) ^ SEED, count), type) };
  };
  const file = llamaGguf({
    name,
    hparams,
    nVocab: vocab.tokens.length,
    tokenizer: chatmlTokenizer(vocab, CHATML_TEMPLATE),
    fileType,
    weights,
  });
  return { ...file, metadata: { ...file.metadata, [RANDOM_WEIGHTS_KEY]: gguf.bool(true) } };
}
