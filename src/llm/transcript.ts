/**
 * Token-exact turn-to-turn reuse. A sequence's KV cache holds the prompt and the reply exactly as
 * generated; rendering the next turn's history from text re-tokenizes that reply, and the result
 * can differ from the generated tokens (a leading space, a different merge), which would end the
 * reusable prefix where the reply starts. So each sequence remembers what it holds as a pair: the
 * rendered text (chat template with the reply) and the tokens it was evaluated as. A later prompt
 * whose rendering starts with that text is built as those tokens plus the new part's tokens, and
 * only the new part is evaluated.
 */
import { LlamaText, type LlamaTextValue, type Token, type Tokenizer } from "node-llama-cpp";

export interface Transcript {
  /** The conversation whose turns these are. */
  key: string;
  /** The rendered conversation so far, the last reply included. */
  text: LlamaText;
  /** `text` as the sequence evaluated it: the prompt's tokens, then the reply's generated ones. */
  tokens: readonly Token[];
}

/**
 * The part of `full` after `prefix`, or undefined when `full` does not start with it. The last
 * value of `prefix` may be a plain text that `full` continues (e.g. a template whose reply and the
 * following turn share one text run); every other value must match exactly.
 */
export function textAfter(prefix: LlamaText, full: LlamaText): LlamaText | undefined {
  const head = prefix.values;
  const values = full.values;
  if (head.length === 0) return full;
  if (values.length < head.length) return undefined;
  const last = head.length - 1;
  for (let i = 0; i < last; i++) if (!sameValue(head[i]!, values[i]!)) return undefined;
  const a = head[last]!;
  const b = values[last]!;
  if (sameValue(a, b)) return LlamaText(values.slice(head.length));
  if (typeof a === "string" && typeof b === "string" && b.startsWith(a)) {
    return LlamaText([b.slice(a.length), ...values.slice(head.length)]);
  }
  return undefined;
}

function sameValue(a: LlamaTextValue, b: LlamaTextValue): boolean {
  if (typeof a === "string" || typeof b === "string") return a === b;
  return a.constructor === b.constructor && a.value === b.value;
}

/**
 * The tokens for `prompt` reusing `transcript` verbatim, or undefined when the prompt does not
 * continue it (another conversation, trimmed or edited history).
 */
export function continueTranscript(transcript: Transcript, prompt: LlamaText, tokenizer: Tokenizer): Token[] | undefined {
  const rest = textAfter(transcript.text, prompt);
  if (!rest) return undefined;
  // Tokenized as a continuation: no leading-space prefix a tokenizer adds at the start of a text.
  return [...transcript.tokens, ...rest.tokenize(tokenizer, "trimLeadingSpace")];
}

/** True when `withReply` is `prompt` followed by exactly the plain text `reply`. */
export function isReplyOf(prompt: LlamaText, withReply: LlamaText, reply: string): boolean {
  const rest = textAfter(prompt, withReply);
  if (!rest) return false;
  const values = rest.values;
  return values.length === 0 ? reply === "" : values.length === 1 && values[0] === reply;
}
