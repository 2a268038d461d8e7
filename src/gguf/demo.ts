// The `parley-demo` model: a bigram model (bigram.ts) of DEMO_CORPUS with a SentencePiece
// vocabulary and the ChatML template.

import { type Bigrams, bigramGguf, countBigrams, greedyTokens } from "./bigram";
import { CHATML_TEMPLATE } from "./chatml";
import { DEMO_CORPUS } from "./corpus";
import { chatmlTokenizer } from "./tokenizer";
import { gguf } from "./values";
import { buildVocab, IM_END, SPACE, tokenId, toPiece, type Vocab } from "./vocab";
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

/** Splits a reply into pieces: words carry their preceding space as ▁, punctuation stands alone (but `{"` and `["`). */
export function replyPieces(reply: string): string[] {
  // A JSON object's or array's opening quote is a piece of its own: as a lone quote it would share
  // the bigrams of a key's closing one, which a colon follows.
  const pieces = Array.from(reply.matchAll(/ ?(?:[A-Za-z0-9']+|[{[]"|[^\sA-Za-z0-9'])/g), (m) => toPiece(m[0]));
  if (pieces.join("") !== toPiece(reply)) throw new Error(`corpus reply is not single-spaced: ${JSON.stringify(reply)}`);
  return pieces;
}

function demoBigrams(): { vocab: Vocab; bigrams: Bigrams } {
  const replies = DEMO_CORPUS.map(replyPieces);
  const vocab = buildVocab(replies.flat());
  const sequences = replies.map((pieces) => pieces.map((p) => tokenId(vocab, p)));
  return { vocab, bigrams: countBigrams(sequences, vocab.tokens.length, tokenId(vocab, IM_END)) };
}

export function demoGguf(): GgufFile {
  const { vocab, bigrams } = demoBigrams();
  const file = bigramGguf(DEMO_MODEL_NAME, bigrams, chatmlTokenizer(vocab, CHATML_TEMPLATE));
  return { ...file, metadata: { ...file.metadata, [DEMO_FINGERPRINT_KEY]: gguf.string(demoFingerprint()) } };
}

/** The reply greedy decoding produces, computed from the bigram table (no repeat penalty). */
export function demoGreedyReply(maxTokens = 60): { text: string; finished: boolean } {
  const { vocab, bigrams } = demoBigrams();
  const { tokens, finished } = greedyTokens(bigrams, maxTokens);
  return { text: tokens.map((t) => vocab.tokens[t]!.replaceAll(SPACE, " ")).join(""), finished };
}
