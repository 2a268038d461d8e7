// The `parley-demo` model: a bigram language model inside a one-layer llama transformer.
//
// Every token is embedded as a one-hot vector over "contexts": one per corpus token that is
// followed by something, plus START, which stands for every other token (in particular the
// "\n" that ends "<|im_start|>assistant\n", so a reply starts where a corpus reply starts).
// Attention and feed-forward weights are zero, so the residual stream carries the one-hot
// vector unchanged to the final RMSNorm, and `output.weight` row v, column c holds the scaled
// log probability that token v follows context c. The logits therefore depend only on the
// last token: argmax follows the most frequent corpus bigram, sampling follows the corpus.

import { DEMO_CORPUS } from "./corpus";
import { llamaGguf, type LlamaHparams, type LlamaTensorSpec } from "./llama";
import { constant, fromFloats } from "./tensor-data";
import { IM_END, SPACE, buildVocab, toPiece, tokenId, type Vocab } from "./vocab";
import { gguf } from "./values";
import type { GgufFile } from "./writer";

export const DEMO_MODEL_NAME = "parley-demo";

/**
 * Bump when a change to how the demo is built changes its bytes without changing the corpus:
 * a start reuses a demo file whose fingerprint matches instead of writing it again.
 */
const DEMO_REVISION = 1;
export const DEMO_FINGERPRINT_KEY = "parley.demo.fingerprint";

export function demoFingerprint(): string {
  return new Bun.CryptoHasher("sha256").update(JSON.stringify([DEMO_REVISION, DEMO_CORPUS])).digest("hex");
}

/** Sharpens the corpus distribution a little, so temperature-1 replies stay readable. */
const LOGIT_SCALE = 1.25;
/** Logit of a bigram never seen in the corpus: e^-30 is never sampled. */
const UNSEEN_LOGIT = -30;
/** Separates equal counts so greedy decoding has exactly one answer (earliest token wins). */
const TIE_BREAK = 1e-3;
const RMS_EPS = 1e-5;
const HEAD_DIM = 64;

/** Splits a reply into pieces: words carry their preceding space as ▁, punctuation stands alone. */
export function replyPieces(reply: string): string[] {
  const pieces = Array.from(reply.matchAll(/ ?(?:[A-Za-z0-9']+|[^\sA-Za-z0-9'])/g), (m) => toPiece(m[0]));
  if (pieces.join("") !== toPiece(reply)) throw new Error(`corpus reply is not single-spaced: ${JSON.stringify(reply)}`);
  return pieces;
}

export interface Bigrams {
  readonly vocab: Vocab;
  /** Context (embedding dimension) of each token id; 0 is START. */
  readonly contextOf: Int32Array;
  readonly nContexts: number;
  /** counts[context * nVocab + next] */
  readonly counts: Uint32Array;
}

export function countBigrams(corpus: readonly string[]): Bigrams {
  const replies = corpus.map(replyPieces);
  const vocab = buildVocab(replies.flat());
  const nVocab = vocab.tokens.length;
  const contextOf = new Int32Array(nVocab); // all START until given their own context
  let nContexts = 1;
  const sequences = replies.map((pieces) => pieces.map((p) => tokenId(vocab, p)));
  for (const seq of sequences) {
    for (const id of seq) if (contextOf[id] === 0) contextOf[id] = nContexts++;
  }
  const counts = new Uint32Array(nContexts * nVocab);
  const end = tokenId(vocab, IM_END);
  for (const seq of sequences) {
    let context = 0;
    for (const id of [...seq, end]) {
      counts[context * nVocab + id]! += 1;
      context = contextOf[id]!;
    }
  }
  return { vocab, contextOf, nContexts, counts };
}

/** output.weight in ggml layout {nEmbd, nVocab}: row = next token, column = context. */
function outputWeights(b: Bigrams, nEmbd: number): Float32Array {
  const nVocab = b.vocab.tokens.length;
  const w = new Float32Array(nVocab * nEmbd).fill(UNSEEN_LOGIT);
  for (let c = 0; c < b.nContexts; c++) {
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

export function demoHparams(nContexts: number): LlamaHparams {
  const nEmbd = Math.ceil(nContexts / HEAD_DIM) * HEAD_DIM;
  return { nEmbd, nLayer: 1, nHead: nEmbd / HEAD_DIM, nHeadKv: nEmbd / HEAD_DIM, nFf: 128, contextLength: 4096, rmsEps: RMS_EPS };
}

export function demoGguf(): GgufFile {
  const bigrams = countBigrams(DEMO_CORPUS);
  const hparams = demoHparams(bigrams.nContexts);
  const { nEmbd } = hparams;
  const nVocab = bigrams.vocab.tokens.length;

  const embeddings = new Float32Array(nVocab * nEmbd);
  bigrams.contextOf.forEach((c, v) => (embeddings[v * nEmbd + c] = 1));
  // RMSNorm turns the one-hot 1 into 1 / sqrt(1/nEmbd + eps); this gain turns it back into 1,
  // so the logits are exactly the stored column.
  const outputNormGain = Math.sqrt(1 / nEmbd + RMS_EPS);

  const weights = (spec: LlamaTensorSpec) => {
    const count = spec.shape.reduce((a, d) => a * d, 1);
    switch (spec.kind) {
      case "token_embd": return { type: "F32" as const, data: fromFloats(embeddings, "F32") };
      case "output": return { type: "F32" as const, data: fromFloats(outputWeights(bigrams, nEmbd), "F32") };
      case "output_norm": return { type: "F32" as const, data: constant(outputNormGain, count, "F32") };
      case "attn_norm":
      case "ffn_norm": return { type: "F32" as const, data: constant(1, count, "F32") };
      default: return { type: "F32" as const, data: constant(0, count, "F32") };
    }
  };
  const file = llamaGguf({ name: DEMO_MODEL_NAME, hparams, vocab: bigrams.vocab, fileType: "F32", weights });
  return { ...file, metadata: { ...file.metadata, [DEMO_FINGERPRINT_KEY]: gguf.string(demoFingerprint()) } };
}

/** The reply greedy decoding produces, computed from the bigram table (no repeat penalty). */
export function demoGreedyReply(maxTokens = 60): { text: string; finished: boolean } {
  const b = countBigrams(DEMO_CORPUS);
  const nVocab = b.vocab.tokens.length;
  const end = tokenId(b.vocab, IM_END);
  let context = 0;
  let text = "";
  for (let i = 0; i < maxTokens; i++) {
    const row = b.counts.subarray(context * nVocab, (context + 1) * nVocab);
    let best = 0;
    for (let v = 1; v < nVocab; v++) if (row[v]! > row[best]!) best = v;
    if (best === end) return { text, finished: true };
    text += b.vocab.tokens[best]!.replaceAll(SPACE, " ");
    context = b.contextOf[best]!;
  }
  return { text, finished: false };
}
