// A SentencePiece-style ("llama" / SPM) vocabulary: special tokens, the 256 byte-fallback
// tokens, then text pieces. llama.cpp's SPM tokenizer only reaches a piece by merging two
// adjacent pieces that are both in the vocabulary, so every piece's prefixes are added too.

/** tokenizer.ggml.token_type values (llama.cpp `llama_token_type`). */
export const TOKEN_TYPE = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

/** SentencePiece's visible space: pieces carry it where the text has a space. */
export const SPACE = "\u2581";

export const UNK = "<unk>";
export const BOS = "<s>";
export const EOS = "</s>";
export const IM_START = "<|im_start|>";
export const IM_END = "<|im_end|>";

/** A special token's text and its token type. */
export type SpecialToken = readonly [text: string, type: number];

/** The demo's specials. Fixed ids: llama.cpp defaults unk/bos/eos to 0/1/2 for SPM vocabularies. */
export const CHATML_SPECIALS: readonly SpecialToken[] = [
  [UNK, TOKEN_TYPE.UNKNOWN],
  [BOS, TOKEN_TYPE.CONTROL],
  [EOS, TOKEN_TYPE.CONTROL],
  [IM_START, TOKEN_TYPE.CONTROL],
  [IM_END, TOKEN_TYPE.CONTROL],
];

export interface Vocab {
  readonly tokens: readonly string[];
  readonly types: readonly number[];
  readonly scores: readonly number[];
  readonly ids: ReadonlyMap<string, number>;
}

export function byteToken(byte: number): string {
  return `<0x${byte.toString(16).toUpperCase().padStart(2, "0")}>`;
}

/** Turns text into piece spelling: spaces become ▁. */
export function toPiece(text: string): string {
  return text.replaceAll(" ", SPACE);
}

/**
 * Builds the vocabulary from `specials` (first, in order), the byte tokens and `pieces` (in the
 * order given; duplicates and missing prefixes are filled in), stopping at `maxSize` tokens.
 * Longer pieces score higher, so merges grow along the prefix chain.
 */
export function buildVocab(pieces: Iterable<string>, maxSize = Infinity, specials: readonly SpecialToken[] = CHATML_SPECIALS): Vocab {
  const tokens: string[] = [];
  const types: number[] = [];
  const scores: number[] = [];
  const ids = new Map<string, number>();
  const add = (text: string, type: number, score: number): void => {
    if (ids.has(text)) return;
    ids.set(text, tokens.length);
    tokens.push(text);
    types.push(type);
    scores.push(score);
  };

  for (const [text, type] of specials) add(text, type, 0);
  for (let b = 0; b < 256; b++) add(byteToken(b), TOKEN_TYPE.BYTE, 0);
  for (const piece of pieces) {
    const chars = Array.from(piece);
    for (let n = 1; n <= chars.length && tokens.length < maxSize; n++) {
      add(chars.slice(0, n).join(""), TOKEN_TYPE.NORMAL, n);
    }
    if (tokens.length >= maxSize) break;
  }
  return { tokens, types, scores, ids };
}

export function tokenId(vocab: Pick<Vocab, "ids">, text: string): number {
  const id = vocab.ids.get(text);
  if (id === undefined) throw new Error(`token ${JSON.stringify(text)} is not in the vocabulary`);
  return id;
}
