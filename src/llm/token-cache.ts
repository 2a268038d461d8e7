/**
 * Tokenizers that remember their results, per user. A rendered conversation tokenizes run by run
 * (`LlamaText.tokenize` calls the tokenizer once per text between special tokens), and from one
 * render to the next, and one turn to the next, almost every run is one seen before: a turn's
 * message with its template text. Remembering them turns the re-tokenizing of a history, which
 * blocks the JS thread (tens of ms per 16,000 CJK characters), into lookups, so a turn tokenizes
 * only its new text.
 */
import type { Token, Tokenizer } from "node-llama-cpp";

/**
 * Tokenizers like `tokenizer`, one per scope (a user), remembering their results up to
 * `capacityTokens` tokens in all. A scope finds only what it tokenized itself: a remembered text
 * tokenizes in no time, so a text another user had sent would reach the first token sooner, a
 * timing side channel. A remembered result is handed out again as the same array: callers must not
 * change it.
 */
export function cachingTokenizers(tokenizer: Tokenizer, capacityTokens: number): (scope: string) => Tokenizer {
  // Insertion order is recency order: a hit is moved to the end, eviction takes from the front.
  const cache = new Map<string, Token[]>();
  let held = 0;

  const tokenize = (scope: string, text: string, specialTokens?: boolean | "builtin", options?: "trimLeadingSpace"): Token[] => {
    // Built-in special tokens are a template's own few, short and cheap; plain text, and text
    // whose special tokens are parsed (a template's rendering, run by run), is kept.
    if (specialTokens === "builtin") return tokenizer(text as never, specialTokens as never, options as never);
    const key = `${scope}\u0000${specialTokens === true ? "s" : "-"}${options === "trimLeadingSpace" ? "t" : "-"}${text}`;
    const known = cache.get(key);
    if (known) {
      cache.delete(key);
      cache.set(key, known);
      return known;
    }
    const tokens = tokenizer(text, specialTokens === true, options);
    cache.set(key, tokens);
    held += tokens.length;
    for (const [oldest, value] of cache) {
      if (held <= capacityTokens || oldest === key) break;
      cache.delete(oldest);
      held -= value.length;
    }
    return tokens;
  };
  return (scope) =>
    Object.assign(
      ((text: string, specialTokens?: boolean | "builtin", options?: "trimLeadingSpace") => tokenize(scope, text, specialTokens, options)) as Tokenizer,
      {
        detokenize: tokenizer.detokenize,
        isSpecialToken: tokenizer.isSpecialToken,
        isEogToken: tokenizer.isEogToken,
      },
    );
}
