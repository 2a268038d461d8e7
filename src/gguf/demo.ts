// The `parley-demo` model: a bigram model (bigram.ts) of DEMO_CORPUS with a SentencePiece
// vocabulary and the ChatML template.

import { toolSyntaxOf } from "../llm/tool-syntax";
import { type Bigrams, bigramGguf, countBigrams, greedyTokens } from "./bigram";
import { callReplies, joinBreaks, loneBreaks, piecesAround } from "./call-replies";
import { CHATML_TEMPLATE } from "./chatml";
import { CALL_REPLIES, DEMO_CORPUS } from "./corpus";
import { chatmlTokenizer } from "./tokenizer";
import { gguf } from "./values";
import { buildVocab, CHATML_SPECIALS, IM_END, SPACE, TOKEN_TYPE, tokenId, toPiece, type Vocab } from "./vocab";
import type { GgufFile } from "./writer";

export const DEMO_MODEL_NAME = "parley-demo";

/**
 * Bump when a change to how the demo is built changes its bytes without changing the corpus:
 * a start reuses a demo file whose fingerprint matches instead of writing it again.
 */
const DEMO_REVISION = 2;
export const DEMO_FINGERPRINT_KEY = "parley.demo.fingerprint";

export function demoFingerprint(): string {
  return new Bun.CryptoHasher("sha256").update(JSON.stringify([DEMO_REVISION, DEMO_CORPUS, CALL_REPLIES])).digest("hex");
}

/** Splits a reply into pieces: words carry their preceding space as ▁, punctuation stands alone (but `{"` and `["`). */
export function replyPieces(reply: string): string[] {
  // A JSON object's or array's opening quote is a piece of its own: as a lone quote it would share
  // the bigrams of a key's closing one, which a colon follows.
  const pieces = Array.from(reply.matchAll(/ ?(?:[A-Za-z0-9']+|[{[]"|[^\sA-Za-z0-9'])/g), (m) => toPiece(m[0]));
  if (pieces.join("") !== toPiece(reply)) throw new Error(`corpus reply is not single-spaced: ${JSON.stringify(reply)}`);
  return pieces;
}

/** A reply's pieces where it may hold lines: a line break is a piece of its own (see `joinBreaks`). */
export const linePieces = (text: string): string[] =>
  text.split("\n").flatMap((line, i) => [...(i > 0 ? ["\n"] : []), ...(line === "" ? [] : replyPieces(line))]);

/**
 * The demo's calls open and close with tokens of their own, as Qwen's do: the engine can then
 * keep a model offered no tools from opening one.
 */
const CALL_MARKS = ["<tool_call>", "</tool_call>"];

function demoBigrams(): { vocab: Vocab; bigrams: Bigrams } {
  const calls = callReplies(toolSyntaxOf(CHATML_TEMPLATE)).map((reply) => joinBreaks(piecesAround(reply, CALL_MARKS, linePieces), CALL_MARKS));
  const words = DEMO_CORPUS.map(replyPieces);
  const replies = [...words, ...calls];
  const vocab = buildVocab(
    replies.flat().filter((piece) => !CALL_MARKS.includes(piece)),
    Infinity,
    [...CHATML_SPECIALS, ...CALL_MARKS.map((mark) => [mark, TOKEN_TYPE.USER_DEFINED] as const)],
  );
  const sequences = replies.map((pieces) => pieces.map((p) => tokenId(vocab, p)));
  const starting = new Set([...loneBreaks(calls, words)].map((piece) => tokenId(vocab, piece)));
  return { vocab, bigrams: countBigrams(sequences, vocab.tokens.length, tokenId(vocab, IM_END), { starting }) };
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
