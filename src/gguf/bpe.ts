// A byte-level BPE ("gpt2") vocabulary as Llama 3 and Qwen ship it: every byte is a token
// (spelled through GPT-2's byte-to-unicode map, so any UTF-8 text tokenizes), each word of the
// corpus is one token reached by a chain of merges, and special tokens come last.
//
// llama.cpp's BPE tokenizer first splits text into words with its pre-tokenizer's regex
// (`tokenizer.ggml.pre`), then within each word repeatedly merges the adjacent pair of lowest
// rank. A word's token is reached by merging its prefix with its next character, one character at
// a time, so every merge's parts are tokens. The ranks are ordered so that no other merge can
// apply inside a word first: words beginning with a space, then those beginning with punctuation
// (where the prefix chain starts at a character few other merges start with) rank before the
// words that begin with a letter, and shorter results before longer ones.

import { TOKEN_TYPE } from "./vocab";

/** The pre-tokenizers written here, by their `tokenizer.ggml.pre` name. */
export type BpePre = "llama-bpe" | "qwen2";

// llama.cpp's regexes (src/llama-vocab.cpp), in JavaScript's syntax: `(?i:…)` spelled out.
const CONTRACTIONS = "'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]";
const PRE_TOKENIZERS: Record<BpePre, RegExp> = {
  "llama-bpe": new RegExp(`${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`, "gu"),
  qwen2: new RegExp(`${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`, "gu"),
};

/** Splits `text` into the words the pre-tokenizer hands to BPE. */
export function preTokenize(pre: BpePre, text: string): string[] {
  return Array.from(text.matchAll(PRE_TOKENIZERS[pre]), (m) => m[0]);
}

/** GPT-2's byte-to-unicode map: printable bytes stand for themselves, the others move above U+0100. */
const BYTE_CHARS: readonly string[] = (() => {
  const chars: string[] = [];
  let shifted = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    chars.push(String.fromCodePoint(printable ? b : 256 + shifted++));
  }
  return chars;
})();

/** `text` as byte-level BPE spells it: one character per UTF-8 byte ("Ġ" for a space, "Ċ" for a newline). */
export function byteLevel(text: string): string {
  return Array.from(new TextEncoder().encode(text), (b) => BYTE_CHARS[b]!).join("");
}

export interface BpeVocab {
  readonly tokens: readonly string[];
  readonly types: readonly number[];
  /** "left right", best (lowest) rank first. */
  readonly merges: readonly string[];
  readonly ids: ReadonlyMap<string, number>;
}

/**
 * The vocabulary for `words` (byte-level spelled, see `byteLevel`), with `specials` (text and
 * token type) after them. Throws if llama.cpp's algorithm would not reach every word as one token.
 */
export function buildBpeVocab(words: Iterable<string>, specials: readonly (readonly [string, number])[]): BpeVocab {
  const tokens: string[] = [...BYTE_CHARS];
  const types: number[] = tokens.map(() => TOKEN_TYPE.NORMAL);
  const ids = new Map(tokens.map((t, i) => [t, i]));
  const unique = [...new Set(words)];
  // A word's first byte, from its byte-level spelling: ASCII letters and digits, and the bytes of
  // other characters, also occur inside words.
  const startsWithLetter = (w: string) => {
    const byte = BYTE_CHARS.indexOf(Array.from(w)[0]!);
    return byte >= 0x80 || /[A-Za-z0-9]/.test(String.fromCharCode(byte));
  };
  const chains = unique.map((word) => {
    const chars = Array.from(word);
    return chars.slice(1).map((c, i) => [chars.slice(0, i + 1).join(""), c] as const);
  });
  // Words that begin with a space first, then with punctuation, then with a letter: a
  // punctuation word (`{"`) may stand inside a spaced one (`Ġ{"`), never the other way round.
  const groupOf = (w: string) => (w.startsWith(BYTE_CHARS[0x20]!) ? 0 : startsWithLetter(w) ? 2 : 1);
  const merges: (readonly [string, string])[] = [];
  const seen = new Set<string>();
  for (const group of [0, 1, 2]) {
    const steps = unique.flatMap((w, i) => (groupOf(w) === group ? chains[i]!.map((m, level) => ({ m, level, length: chains[i]!.length })) : []));
    // Longer words first within a level (`!"}` holds `"}`), else the corpus order (stable).
    steps.sort((a, z) => a.level - z.level || (group === 1 ? z.length - a.length : 0));
    for (const { m } of steps) {
      const key = `${m[0]} ${m[1]}`;
      if (seen.has(key)) continue;
      seen.add(key);
      merges.push(m);
      const merged = m[0] + m[1];
      if (!ids.has(merged)) {
        ids.set(merged, tokens.length);
        tokens.push(merged);
        types.push(TOKEN_TYPE.NORMAL);
      }
    }
  }
  const ranks = new Map(merges.map(([a, b], rank) => [`${a} ${b}`, rank]));
  // A word whose chain another word's earlier merge cuts ("lo" of "lookup" inside "Hello") is
  // joined from the parts it ends in, by merges ranked after all others: they apply only where
  // those parts meet, so no word that was one token is split by them.
  for (const word of unique) {
    const parts = bpe(word, ranks);
    for (let joined = parts[0]!, i = 1; i < parts.length; i++) {
      const key = `${joined} ${parts[i]}`;
      joined += parts[i]!;
      if (ranks.has(key)) continue;
      ranks.set(key, ranks.size);
      merges.push([joined.slice(0, joined.length - parts[i]!.length), parts[i]!]);
      if (!ids.has(joined)) {
        ids.set(joined, tokens.length);
        tokens.push(joined);
        types.push(TOKEN_TYPE.NORMAL);
      }
    }
  }
  for (const [text, type] of specials) {
    if (ids.has(text)) throw new Error(`special token ${text} is also a word`);
    ids.set(text, tokens.length);
    tokens.push(text);
    types.push(type);
  }
  const vocab: BpeVocab = { tokens, types, merges: merges.map(([a, b]) => `${a} ${b}`), ids };
  for (const word of unique) {
    const parts = bpe(word, ranks);
    if (parts.length !== 1) throw new Error(`word ${JSON.stringify(word)} tokenizes as ${JSON.stringify(parts)}`);
  }
  return vocab;
}

/** BPE on one word as llama.cpp does it: merge the adjacent pair of lowest rank (leftmost on a tie) until none applies. */
export function bpe(word: string, ranks: ReadonlyMap<string, number>): string[] {
  const parts = Array.from(word);
  for (;;) {
    let best = -1;
    let bestRank = Infinity;
    for (let i = 0; i + 1 < parts.length; i++) {
      const rank = ranks.get(`${parts[i]} ${parts[i + 1]}`);
      if (rank !== undefined && rank < bestRank) {
        best = i;
        bestRank = rank;
      }
    }
    if (best < 0) return parts;
    parts.splice(best, 2, parts[best]! + parts[best + 1]!);
  }
}
