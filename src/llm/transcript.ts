/**
 * Token-exact turn-to-turn reuse. A sequence's KV cache holds the prompt and the reply exactly as
 * generated; rendering the next turn's history from text re-tokenizes that reply, and the result
 * can differ from the generated tokens (a leading space, a different merge), which would end the
 * reusable prefix where the reply starts. So each sequence remembers what it holds as a pair: the
 * rendered text (chat template with the reply) and the tokens it was evaluated as. A later prompt
 * whose rendering starts with that text is built as those tokens plus the new part's tokens, and
 * only the new part is evaluated.
 */
import { LlamaText, type LlamaTextValue, SpecialTokensText, type Token, type Tokenizer } from "node-llama-cpp";
import type { Turn } from "./types";

export interface Transcript {
  /** The conversation whose turns these are. */
  key: string;
  /** The rendered conversation so far, the last reply included. */
  text: LlamaText;
  /** `text` as the sequence evaluated it: the prompt's tokens, then the reply's generated ones. */
  tokens: readonly Token[];
  /** The window's first turn after the system turns (see `PromptRenderer.windowsFrom`). */
  opens?: Turn;
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

/** What a shifted transcript keeps: `tokens`, once the sequence has dropped its cells `drop`. */
export interface ShiftedPrompt {
  tokens: Token[];
  /** Token positions [start, end) of the turns the prompt no longer holds. */
  drop: { start: number; end: number };
}

const isSpecialValue = (value: LlamaTextValue) => typeof value !== "string";

/** A special value that is `boundary`, or special text ending with it. */
const endsLike = (value: LlamaTextValue, boundary: LlamaTextValue) =>
  sameValue(value, boundary) || (value instanceof SpecialTokensText && boundary instanceof SpecialTokensText && value.value.endsWith(boundary.value));

/**
 * The prompt's tokens reusing `transcript` past a context overflow: the fitted prompt dropped the
 * oldest turns the transcript holds, and keeps the rest as they were. The transcript's text is
 * then `head + dropped + kept`, where `head` and `dropped` end with the same special text (a turn
 * boundary; the first turn's opener may be the end of a later turn's longer one, as ChatML's
 * `<|im_start|>user` is of `<|im_end|>\n<|im_start|>user`), and the prompt is `head + kept + new`. The sequence drops the dropped turns' cells
 * and shifts the kept ones down (llama.cpp's context shift), so only the new part is evaluated.
 * Undefined when the prompt is not such a continuation, or the boundaries cannot be found exactly
 * in the transcript's tokens.
 */
export function shiftTranscript(transcript: Transcript, prompt: LlamaText, tokenizer: Tokenizer): ShiftedPrompt | undefined {
  const held = transcript.text.values;
  const wanted = prompt.values;
  let head = 0;
  while (head < held.length && head < wanted.length && sameValue(held[head]!, wanted[head]!)) head++;
  while (head > 0 && !isSpecialValue(held[head - 1]!)) head--;
  if (head === 0) return undefined;
  const boundary = held[head - 1]!;
  const after = LlamaText(wanted.slice(head));
  for (let kept = head + 1; kept < held.length; kept++) {
    if (!endsLike(held[kept - 1]!, boundary)) continue;
    const rest = textAfter(LlamaText(held.slice(kept)), after);
    if (!rest) continue;
    const start = endOfValue(held, head - 1, transcript.tokens, tokenizer);
    const end = endOfValue(held, kept - 1, transcript.tokens, tokenizer);
    if (start === undefined || end === undefined) return undefined;
    return {
      tokens: [...transcript.tokens.slice(0, start), ...transcript.tokens.slice(end), ...rest.tokenize(tokenizer, "trimLeadingSpace")],
      drop: { start, end },
    };
  }
  return undefined;
}

/**
 * Where the special value `values[index]` ends in `tokens`, found by counting special tokens: the
 * transcript's special values are its only special tokens (a reply is plain text). Undefined when
 * the tokens there are not that value's.
 */
function endOfValue(values: readonly LlamaTextValue[], index: number, tokens: readonly Token[], tokenizer: Tokenizer): number | undefined {
  let specials = 0;
  for (const value of values.slice(0, index + 1)) {
    if (isSpecialValue(value))
      specials += LlamaText([value])
        .tokenize(tokenizer)
        .filter((token) => tokenizer.isSpecialToken(token)).length;
  }
  const own = LlamaText([values[index]!]).tokenize(tokenizer);
  const trailing = own.length - 1 - own.findLastIndex((token) => tokenizer.isSpecialToken(token));
  let seen = 0;
  for (let i = 0; i < tokens.length; i++) {
    if (!tokenizer.isSpecialToken(tokens[i]!) || ++seen < specials) continue;
    const end = i + 1 + trailing;
    const at = tokens.slice(end - own.length, end);
    return at.length === own.length && at.every((token, j) => token === own[j]) ? end : undefined;
  }
  return undefined;
}
