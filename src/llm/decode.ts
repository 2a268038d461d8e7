/**
 * The generation loop, driven at the lowest public level (`sequence.evaluate`): the prompt's new
 * tokens go in, sampled tokens come out one at a time and are turned into text as they arrive.
 * LlamaChat re-renders and re-checks the whole response per token; this measured faster and
 * keeps the exact generated tokens for the next turn.
 */
import type { LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";

export type StopReason = "stop" | "maxTokens" | "abort";

export interface DecodeOptions {
  temperature: number;
  seed?: number;
  maxTokens: number;
  signal: AbortSignal;
  /** Besides the model's end-of-generation tokens: e.g. the chat template's end-of-turn token. */
  stopTokens: ReadonlySet<Token>;
}

export interface Decoded {
  /** Every token taken into the reply (a stop token is not). */
  tokens: Token[];
  stopReason: StopReason;
}

/** LlamaChat's default repeat penalty window, kept so replies do not change with the driver. */
const PENALTY_LAST_TOKENS = 64;

/** Evaluates `input` after what the sequence holds and samples the reply, calling `emit` with each text piece. */
export async function decode(
  sequence: LlamaContextSequence,
  input: Token[],
  options: DecodeOptions,
  emit: (text: string) => void,
): Promise<Decoded> {
  const { signal, stopTokens, maxTokens } = options;
  const model = sequence.model;
  const tokens: Token[] = [];
  if (signal.aborted) return { tokens, stopReason: "abort" };

  const newline = model.tokens.nl;
  const text = new TextStream(model);
  const iterator = sequence.evaluate(input, {
    temperature: options.temperature,
    seed: options.seed,
    repeatPenalty: {
      punishTokens: () => tokens.slice(-PENALTY_LAST_TOKENS).filter((token) => token !== newline),
      maxPunishTokens: PENALTY_LAST_TOKENS,
    },
  });
  let stopReason: StopReason = "stop";
  try {
    for (;;) {
      const step = await iterator.next();
      // Checked before the token is used: an abort during the prompt yields an empty reply.
      if (signal.aborted) {
        stopReason = "abort";
        break;
      }
      if (step.done || stopTokens.has(step.value)) break;
      tokens.push(step.value);
      const piece = text.push(step.value);
      if (piece !== "") emit(piece);
      if (tokens.length >= maxTokens) {
        stopReason = "maxTokens";
        break;
      }
    }
  } finally {
    await iterator.return();
  }
  const rest = text.flush();
  if (rest !== "") emit(rest);
  return { tokens, stopReason };
}

/** Tokens the detokenizer sees before new ones, for spacing rules; a few suffice. */
const CONTEXT_TOKENS = 8;
/** A character is at most 4 bytes, so a split one completes within 4 tokens. */
const MAX_PENDING = 4;

/**
 * Incremental detokenization. A token can end inside a multi-byte character: its text is held
 * back until the character completes, so no piece carries a broken character.
 */
class TextStream {
  private pending: Token[] = [];
  private context: Token[] = [];

  constructor(private readonly model: LlamaModel) {}

  push(token: Token): string {
    this.pending.push(token);
    const text = this.model.detokenize(this.pending, false, this.context);
    if (text.endsWith("\uFFFD") && this.pending.length < MAX_PENDING) return "";
    return this.take(text);
  }

  flush(): string {
    return this.pending.length === 0 ? "" : this.take(this.model.detokenize(this.pending, false, this.context));
  }

  private take(text: string): string {
    this.context = this.context.concat(this.pending).slice(-CONTEXT_TOKENS);
    this.pending = [];
    return text;
  }
}
