/**
 * Renders a conversation with the model's chat template and trims it to fit the context.
 *
 * Trimming happens here rather than in a context shift because the engine must know the exact
 * prompt (for token counts and the `prompt` it reports) before generation starts, and because
 * LlamaChat's default shift dropped the new message itself: with a 256-token context, both a
 * 16,000-character message and a 40-turn history left it answering a conversation with no user
 * turn at all. The policy here: drop the oldest turns first, keeping leading system
 * turns; if the new message alone is still too long, keep its end (the newest text).
 */
import type { ChatHistoryItem, ChatWrapper, LlamaModel, LlamaText, Token } from "node-llama-cpp";
import type { Turn } from "./types";

export interface FittedPrompt {
  /** The history that fits, oldest turns dropped if needed. */
  history: ChatHistoryItem[];
  /** `history` rendered with the chat template, ending with the open assistant turn. */
  text: LlamaText;
  /** `text` tokenized. */
  tokens: Token[];
}

const REPLACEMENT_CHAR = "\uFFFD";

export class PromptRenderer {
  constructor(
    private readonly model: LlamaModel,
    private readonly chatWrapper: ChatWrapper,
  ) {}

  /** Fits `turns` into at most `budget` prompt tokens. */
  fit(turns: readonly Turn[], budget: number): FittedPrompt {
    const items = turns.map(toHistoryItem);
    const whole = this.render(items);
    if (whole.tokens.length <= budget) return whole;

    // Outside the contract (the new user message comes last): nothing sensible to cut.
    const newest = turns.at(-1);
    if (newest?.role !== "user") return whole;

    const pinned = leadingSystemCount(items);
    const head = items.slice(0, pinned);
    const dialogue = items.slice(pinned);
    const last = dialogue.length - 1;

    // Start the kept window at a user turn, so the model never sees a reply without its question.
    const starts = dialogue.flatMap((item, i) => (i > 0 && item.type === "user" ? [i] : []));
    if (starts.at(-1) !== last) starts.push(last);

    // Fewer turns never render to more tokens, so the earliest fitting start is found by bisection.
    let lo = 0;
    let hi = starts.length - 1;
    let best: FittedPrompt | undefined;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const candidate = this.render([...head, ...dialogue.slice(starts[mid])]);
      if (candidate.tokens.length <= budget) {
        best = candidate;
        hi = mid - 1;
      } else {
        lo = mid + 1;
      }
    }
    if (best) return best;

    // Even the newest turn alone is too long: cut its start, dropping the system prompt only if
    // the two cannot share the context at all.
    return (
      this.truncateLast(head, newest, budget) ??
      this.truncateLast([], newest, budget) ??
      this.render([{ type: "user", text: "" }])
    );
  }

  /** `before` plus the end of `turn` that fits; undefined if even its empty text does not fit. */
  private truncateLast(before: ChatHistoryItem[], turn: Turn, budget: number): FittedPrompt | undefined {
    const withText = (content: string) => this.render([...before, toHistoryItem({ ...turn, content })]);

    const overhead = withText("").tokens.length;
    if (overhead > budget) return undefined;

    const textTokens = this.model.tokenize(turn.content, false);
    let keep = Math.min(textTokens.length, budget - overhead);
    while (keep > 0) {
      const candidate = withText(stripPartialChar(this.model.detokenize(textTokens.slice(-keep), false)));
      const excess = candidate.tokens.length - budget;
      if (excess <= 0) return candidate;
      // Re-tokenizing a cut text can merge differently; shrink by the observed excess and retry.
      keep -= excess;
    }
    return withText("");
  }

  /** `history` followed by the assistant's `reply`, rendered as the template shows a reply in progress. */
  withReply(history: readonly ChatHistoryItem[], reply: string): LlamaText {
    const response = reply === "" ? [] : [reply];
    return this.chatWrapper.generateContextState({ chatHistory: [...history, { type: "model", response }] }).contextText;
  }

  private render(history: ChatHistoryItem[]): FittedPrompt {
    // The empty model turn renders the assistant's opening, where generation starts.
    const text = this.withReply(history, "");
    return { history, text, tokens: text.tokenize(this.model.tokenizer) };
  }
}

function toHistoryItem(turn: Turn): ChatHistoryItem {
  switch (turn.role) {
    case "system":
      return { type: "system", text: turn.content };
    case "user":
      return { type: "user", text: turn.content };
    case "assistant":
      return { type: "model", response: [turn.content] };
  }
}

function leadingSystemCount(items: readonly ChatHistoryItem[]): number {
  const index = items.findIndex((item) => item.type !== "system");
  return index < 0 ? items.length : index;
}

/** A cut through a multi-token character leaves a replacement character at the start. */
function stripPartialChar(text: string): string {
  let start = 0;
  while (text[start] === REPLACEMENT_CHAR) start++;
  return text.slice(start);
}
