/**
 * A reply's tokens turned into text as they arrive. A token can end inside a multi-byte character:
 * its text is held back until the character completes, so no piece carries a broken character.
 *
 * New tokens are detokenized after the last few, as node-llama-cpp's `detokenize` with context
 * does (the text of context and tokens, less the context's own text), but the context's text is
 * kept rather than detokenized again for every token: one native call a token instead of two, on
 * the path between a sampled token and the next batch (a token's handling there, median, went from
 * 61–105 µs to 46–82 µs on bench-small).
 */
import type { LlamaModel, Token } from "node-llama-cpp";

/** Tokens of context the detokenizer is given for spacing rules, as node-llama-cpp gives (`maxRecentDetokenizerTokens`). */
const CONTEXT_TOKENS = 3;
/** The context grows to this many tokens before it is cut back to CONTEXT_TOKENS and its text detokenized anew. */
const CONTEXT_WINDOW = 16;
/** A character is at most 4 bytes, so a split one completes within 4 tokens. */
const MAX_PENDING = 4;

export class TextStream {
  private pending: Token[] = [];
  private context: Token[] = [];
  private contextText = "";

  constructor(private readonly model: LlamaModel) {}

  /** The text `token` completes: empty while a character is still split. */
  push(token: Token): string {
    this.pending.push(token);
    const { text, whole } = this.detokenize();
    if (text.endsWith("\uFFFD") && this.pending.length < MAX_PENDING) return "";
    return this.take(text, whole);
  }

  /** Tokens whose text is held back (a character still split). */
  get held(): number {
    return this.pending.length;
  }

  /** What is held back, at the reply's end. */
  flush(): string {
    if (this.pending.length === 0) return "";
    const { text, whole } = this.detokenize();
    return this.take(text, whole);
  }

  /** The pending tokens' text; `whole` is that of context and pending tokens together, when it was detokenized. */
  private detokenize(): { text: string; whole?: string } {
    if (this.contextText !== "") {
      const whole = this.model.detokenize([...this.context, ...this.pending]);
      if (whole.startsWith(this.contextText)) return { text: whole.slice(this.contextText.length), whole };
    }
    return { text: this.model.detokenize(this.pending) };
  }

  private take(text: string, whole: string | undefined): string {
    const context = [...this.context, ...this.pending];
    this.pending = [];
    if (whole !== undefined && context.length <= CONTEXT_WINDOW) {
      this.context = context;
      this.contextText = whole;
    } else {
      this.context = context.slice(-CONTEXT_TOKENS);
      this.contextText = this.model.detokenize(this.context);
    }
    return text;
  }
}
