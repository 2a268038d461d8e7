/**
 * A reply's generation: the turn goes to the scheduler (scheduler.ts), which readies its slot,
 * evaluates the prompt and samples the reply's tokens in batches shared with the other slots;
 * each is turned into text as it arrives. LlamaChat re-renders and re-checks the whole response per token; this measured faster
 * and keeps the exact generated tokens for the next turn.
 */
import type { Token } from "node-llama-cpp";
import type { TokenLogprobs } from "../natives/addon";
import type { StopWhen } from "./line-stop";
import { ReplyText } from "./reply-text";
import type { ReadyPrompt, Scheduler, Turn } from "./scheduler";
import { TextStream } from "./text-stream";
import type { ThoughtMarkers } from "./thought-text";
import type { ToolCallText } from "./tool-call-text";
import type { ReplyPiece, TokenLogprob } from "./types";

/** `lines`: a condition on the answer's lines ended it (line-stop.ts). */
export type StopReason = "stop" | "maxTokens" | "lines" | "abort";

/** The turn, as the scheduler runs it, but for what decoding a reply's text adds. */
export type ReplyTurn = Omit<Turn, "onToken" | "onPrompt">;

export interface DecodeOptions {
  /** Whether a sampled token ends the reply (it is then not part of it): see chat-stops.ts. */
  endsReply(token: Token): boolean;
  /** Texts that end the reply's answer where they begin; they are not part of it (see stop-text.ts). */
  stopStrings?: readonly string[];
  /** Conditions on the answer's lines that end the reply (see line-stop.ts). */
  stopWhen?: StopWhen;
  /** The chat format's thought markers: the reply's thought is told apart from its answer (see thought-text.ts). */
  thought?: ThoughtMarkers;
  /** The reply may call tools: its calls are told apart from its text (see tool-call-text.ts). */
  calls?: ToolCallText;
  /** Special tokens the reply's text shows as this text (a call's opener), though text leaves special tokens out. */
  shown?: ReadonlyMap<Token, string>;
  /**
   * The reply's sampling's lazy grammar: armed when a token ends exactly at a call's opener, so it
   * holds the text after it. An opener that ends inside a token leaves the call unconstrained.
   */
  lazyGrammar?: { armed: boolean };
  /** The reply's tokens' log-probabilities as a client is shown them: asked for, the answer's go out as its text is shown. */
  spell?: (token: Token, logprobs: TokenLogprobs) => TokenLogprob;
  /**
   * The thought (see `thought`) at most `tokens` tokens, then `close` (its close marker's tokens)
   * taken as if generated, so the answer follows; 0 closes it as it opens.
   */
  thoughtBudget?: { tokens: number; close: readonly Token[] };
}

export interface Decoded {
  /** Every token generated (a stop token is not; the tokens of a matched stop string are). */
  tokens: Token[];
  /**
   * The reply as the sequence holds it, token for token: all of it, or after a stop string the
   * whole tokens before the stop (their text may end a little before the reply's does).
   */
  spelled: { tokens: Token[]; text: string };
  stopReason: StopReason;
  /** The stop string that ended the reply, when one did. */
  stopString?: string;
  /** The prompt as the slot was readied for it; none when the turn ended before. */
  prompt?: ReadyPrompt;
  /** Of `tokens`, the thought's: up to and including the one that closed it. */
  reasoningTokens: number;
}

/** Runs the turn on the scheduler, calling `emit` with each text piece of its reply. */
export async function decode(scheduler: Scheduler, turn: ReplyTurn, options: DecodeOptions, emit: (piece: ReplyPiece) => void): Promise<Decoded> {
  const { signal } = turn;
  const { endsReply } = options;
  const tokens: Token[] = [];
  let prompt: ReadyPrompt | undefined;
  let maxTokens = Infinity;
  const text = new TextStream(turn.slot.sequence.model);
  const replyText = new ReplyText(options.thought, options.stopStrings ?? [], options.calls, options.stopWhen);
  let spelled = "";
  // Where whole tokens and the reply's text agree; a stop string can begin in text held earlier.
  const boundaries = [{ tokens: 0, chars: 0 }];
  const take = (piece: string) => {
    if (piece === "") return;
    spelled += piece;
    boundaries.push({ tokens: tokens.length, chars: spelled.length });
    for (const shown of replyText.push(piece)) emit(shown);
  };
  // Answer tokens' log-probabilities, each out once the text up to its end has been shown; the
  // thought's, a call's and those past a stop string never are. A token's end is known once its
  // text is out of the text stream (a split character holds it).
  const logprobs: { token: number; end?: number; entry: TokenLogprob }[] = [];
  const release = () => {
    const spelledOut = tokens.length - text.held;
    for (let i = logprobs.length - 1; i >= 0 && logprobs[i]!.end === undefined; i--) {
      if (logprobs[i]!.token < spelledOut) logprobs[i]!.end = spelled.length;
    }
    const start = replyText.answerStart;
    if (start === undefined) return;
    const through = replyText.shownThrough;
    let count = 0;
    while (count < logprobs.length && logprobs[count]!.end !== undefined && logprobs[count]!.end! <= through) count++;
    const entries = logprobs.splice(0, count).flatMap(({ end, entry }) => (end! > start ? [entry] : []));
    if (entries.length > 0) emit({ kind: "logprobs", entries });
  };
  const budget = options.thoughtBudget;
  // Reply tokens before the thought's first, once it has opened; closing once its close is forced.
  let thoughtFrom: number | undefined;
  /** Whether the thought opened, and the reply's tokens up to and including the one that closed it. */
  let thoughtOpened = false;
  let thoughtEnd: number | undefined;
  let closing = false;
  /** The close marker's tokens, once the open thought has had its budget. */
  const closeThought = (): readonly Token[] | undefined => {
    if (!budget || closing || replyText.thoughtPhase !== "thought") return undefined;
    thoughtFrom ??= tokens.length;
    if (tokens.length - thoughtFrom < budget.tokens) return undefined;
    closing = true;
    return budget.close;
  };
  let stopReason: StopReason | undefined;
  await scheduler.run({
    ...turn,
    onPrompt(ready) {
      prompt = ready;
      maxTokens = ready.maxTokens;
      emit({ kind: "prompt", tokens: ready.tokens.length, cachedTokens: ready.cachedTokens });
      // A thought the prompt opens is open before the first token.
      return closeThought();
    },
    mayForceAt() {
      if (!budget || closing) return Infinity;
      const phase = replyText.thoughtPhase;
      // Before the thought opens, each token may open it.
      return phase === "before" ? tokens.length + 1 : phase === "thought" ? (thoughtFrom ?? tokens.length) + budget.tokens : Infinity;
    },
    onToken(token, probabilities) {
      // Checked before the token is used: an abort during the prompt yields an empty reply.
      if (signal.aborted) return false;
      if (endsReply(token)) {
        // Checked at the end token too, as llama-server does: a line it had not yet measured may still cut the reply.
        replyText.checkLines();
        stopReason = "stop";
        return false;
      }
      tokens.push(token);
      const shown = options.shown?.get(token);
      if (shown === undefined) take(text.push(token));
      else {
        take(text.flush());
        take(shown);
      }
      if (replyText.thoughtPhase === "thought") thoughtOpened = true;
      else if (thoughtOpened && thoughtEnd === undefined && replyText.thoughtPhase === "after") thoughtEnd = tokens.length;
      if (probabilities && options.spell) {
        logprobs.push({ token: tokens.length - 1, entry: options.spell(token, probabilities) });
        release();
      }
      // Before the stop strings: where both end the reply at one token, llama-server says its limit did.
      if (replyText.checkLines()) {
        stopReason = "lines";
        return false;
      }
      if (replyText.stoppedAt !== undefined) {
        stopReason = "stop";
        return false;
      }
      const { lazyGrammar, calls } = options;
      if (lazyGrammar && !lazyGrammar.armed && calls?.openedAt === spelled.length) lazyGrammar.armed = true;
      if (tokens.length >= maxTokens) {
        stopReason = "maxTokens";
        return false;
      }
      return closeThought() ?? true;
    },
  });
  // Ended by the signal, between batches or at a token.
  stopReason ??= "abort";
  take(text.flush());
  // The held-back end of a reply cut at maxTokens can still complete a stop string.
  if (replyText.stoppedAt !== undefined && stopReason === "maxTokens") stopReason = "stop";
  for (const rest of replyText.flush()) emit(rest);
  release();
  const end = replyText.stoppedAt ?? spelled.length;
  const whole = boundaries.findLast((boundary) => boundary.chars <= end)!;
  const stopString = stopReason === "stop" ? replyText.stopString : undefined;
  const reasoningTokens = thoughtEnd ?? (thoughtOpened ? tokens.length : 0);
  return {
    tokens,
    spelled: { tokens: tokens.slice(0, whole.tokens), text: spelled.slice(0, whole.chars) },
    stopReason,
    ...(stopString !== undefined ? { stopString } : {}),
    ...(prompt ? { prompt } : {}),
    reasoningTokens,
  };
}
