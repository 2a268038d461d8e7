// A bigram language model inside a one-layer llama transformer: the builder behind every
// generated chat model (the demo and the family presets).
//
// Every token is embedded as a one-hot vector over "contexts": one per corpus token that is
// followed by something, plus START, which stands for every other token (in particular the last
// token of the template's assistant opening, so a reply starts where a corpus reply starts).
// Attention and feed-forward weights are zero, so the residual stream carries the one-hot
// vector unchanged to the final RMSNorm, and `output.weight` row v, column c holds the scaled
// log probability that token v follows context c. The logits therefore depend only on the
// last token: argmax follows the most frequent corpus bigram, sampling follows the corpus.

import { type LlamaArchitecture, type LlamaHparams, type LlamaTensorSpec, llamaGguf } from "./llama";
import { constant, fromFloats } from "./tensor-data";
import type { GgufValue } from "./values";
import type { GgufFile } from "./writer";

/** Sharpens the corpus distribution a little, so temperature-1 replies stay readable. */
const LOGIT_SCALE = 1.25;
/** Logit of a bigram never seen in the corpus: e^-30 is never sampled. */
const UNSEEN_LOGIT = -30;
/**
 * The end of the reply where it was never seen: above every other unseen token, so a reply a
 * grammar holds to tokens none of which was seen here (a call's markup spelled out, say) ends as
 * soon as the grammar lets it instead of writing whatever token comes first; still never sampled
 * beside a token that was seen.
 */
const UNSEEN_END_LOGIT = -20;
/** Separates equal counts so greedy decoding has exactly one answer (earliest token wins). */
const TIE_BREAK = 1e-3;
const RMS_EPS = 1e-5;
const HEAD_DIM = 64;

export interface Bigrams {
  readonly nVocab: number;
  /** The token that ends every reply. */
  readonly end: number;
  /** Context (embedding dimension) of each token id; 0 is START. */
  readonly contextOf: Int32Array;
  readonly nContexts: number;
  /** counts[context * nVocab + next] */
  readonly counts: Uint32Array;
}

/** How `countBigrams` learns a corpus beyond its bigrams. */
export interface Learning {
  /** False for a reply learned from its second token on: what follows its first, never that a reply may begin so. */
  begins?: (reply: number) => boolean;
  /**
   * Tokens that keep START's context, what follows them unlearned: a line break a reply writes
   * that is also the last token of an assistant opening, whose context must stay a reply's start.
   */
  starting?: ReadonlySet<number>;
}

/** Counts the bigrams of `replies` (token ids, each followed by `end`). */
export function countBigrams(replies: readonly (readonly number[])[], nVocab: number, end: number, learning: Learning = {}): Bigrams {
  const { begins = () => true, starting = new Set() } = learning;
  const contextOf = new Int32Array(nVocab); // all START until given their own context
  let nContexts = 1;
  for (const seq of replies) {
    for (const id of seq) if (contextOf[id] === 0 && !starting.has(id)) contextOf[id] = nContexts++;
  }
  const counts = new Uint32Array(nContexts * nVocab);
  for (const [i, seq] of replies.entries()) {
    let context = 0;
    let learned = begins(i);
    for (const id of [...seq, end]) {
      if (learned) counts[context * nVocab + id]! += 1;
      context = contextOf[id]!;
      learned = !starting.has(id);
    }
  }
  return { nVocab, end, contextOf, nContexts, counts };
}

/** output.weight in ggml layout {nEmbd, nVocab}: row = next token, column = context. */
function outputWeights(b: Bigrams, nEmbd: number): Float32Array {
  const { nVocab } = b;
  const w = new Float32Array(nVocab * nEmbd).fill(UNSEEN_LOGIT);
  for (let c = 0; c < b.nContexts; c++) {
    w[b.end * nEmbd + c] = UNSEEN_END_LOGIT;
    const row = b.counts.subarray(c * nVocab, (c + 1) * nVocab);
    const total = row.reduce((s, n) => s + n, 0);
    const seen = Array.from(row.keys()).filter((v) => row[v]! > 0);
    seen.sort((a, z) => row[z]! - row[a]! || a - z);
    seen.forEach((v, rank) => {
      w[v * nEmbd + c] = LOGIT_SCALE * Math.log(row[v]! / total) - TIE_BREAK * rank;
    });
  }
  return w;
}

export function bigramHparams(nContexts: number): LlamaHparams {
  const nEmbd = Math.ceil(nContexts / HEAD_DIM) * HEAD_DIM;
  return { nEmbd, nLayer: 1, nHead: nEmbd / HEAD_DIM, nHeadKv: nEmbd / HEAD_DIM, nFf: 128, contextLength: 4096, rmsEps: RMS_EPS };
}

export function bigramGguf(name: string, b: Bigrams, tokenizer: Readonly<Record<string, GgufValue>>, architecture: LlamaArchitecture = "llama"): GgufFile {
  const hparams = bigramHparams(b.nContexts);
  const { nEmbd } = hparams;
  const { nVocab } = b;

  const embeddings = new Float32Array(nVocab * nEmbd);
  for (const [v, c] of b.contextOf.entries()) embeddings[v * nEmbd + c] = 1;
  // RMSNorm turns the one-hot 1 into 1 / sqrt(1/nEmbd + eps); this gain turns it back into 1,
  // so the logits are exactly the stored column.
  const outputNormGain = Math.sqrt(1 / nEmbd + RMS_EPS);

  const weights = (spec: LlamaTensorSpec) => {
    const count = spec.shape.reduce((a, d) => a * d, 1);
    switch (spec.kind) {
      case "token_embd":
        return { type: "F32" as const, data: fromFloats(embeddings, "F32") };
      case "output":
        return { type: "F32" as const, data: fromFloats(outputWeights(b, nEmbd), "F32") };
      case "output_norm":
        return { type: "F32" as const, data: constant(outputNormGain, count, "F32") };
      case "attn_norm":
      case "ffn_norm":
        return { type: "F32" as const, data: constant(1, count, "F32") };
      default:
        return { type: "F32" as const, data: constant(0, count, "F32") };
    }
  };
  return llamaGguf({ name, architecture, hparams, nVocab, tokenizer, fileType: "F32", weights });
}

/** The tokens greedy decoding produces (no repeat penalty), computed from the bigram table; `finished` when it reached `end`. */
export function greedyTokens(b: Bigrams, maxTokens = 60): { tokens: number[]; finished: boolean } {
  const { nVocab } = b;
  const tokens: number[] = [];
  let context = 0;
  for (let i = 0; i < maxTokens; i++) {
    const row = b.counts.subarray(context * nVocab, (context + 1) * nVocab);
    let best = 0;
    for (let v = 1; v < nVocab; v++) if (row[v]! > row[best]!) best = v;
    if (best === b.end) return { tokens, finished: true };
    tokens.push(best);
    context = b.contextOf[best]!;
  }
  return { tokens, finished: false };
}
