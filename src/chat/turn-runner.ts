import type { ConversationItem } from "../db/types";
import { isAbort, Overloaded } from "../errors";
import type { ModelPurpose } from "../gguf/describe";
import type { GgufValue } from "../gguf/values";
import {
  BudgetExceeded,
  type Engine,
  type FinishReason,
  type GenerateRequest,
  type GenerateResult,
  type Measured,
  replyRoom,
  type TokenLogprob,
  type ToolCallPart,
} from "../llm/engine";
import type { HeldEngine } from "../llm/loaded-models";
import type { QuotaState, TokenHold, TokenLedger } from "./token-ledger";

/** The next piece of a reply's answer. */
export interface TurnDelta {
  type: "delta";
  content: string;
}

/** The next piece of a reasoning model's thought, which comes before its answer. */
export interface TurnReasoning {
  type: "reasoning";
  content: string;
}

/** A part of a call of a tool the reply makes, after its answer's text: see `ToolCallPart`. */
export interface TurnToolCall {
  type: "toolCall";
  part: ToolCallPart;
}

/**
 * What a turn that runs tools on their servers tells besides its replies' pieces: a model turn
 * begins (`step`, whose items are named by `stepStem`), the model writes a call of a server's tool
 * (`call`; one that waits for approval is asked, not made), or a server's item is done (`item`:
 * its tools listed, a call's result).
 */
export type TurnServerTool =
  | { type: "serverTool"; event: "step"; step: number }
  | { type: "serverTool"; event: "call"; part: ToolCallPart; server: string; approval: boolean }
  | { type: "serverTool"; event: "item"; item: ConversationItem };

/** What a reply yields as it is generated. */
export type TurnEvent = TurnDelta | TurnReasoning | TurnToolCall | TurnLogprobs | TurnPrompt | TurnServerTool;

/** The prompt as evaluated, before the reply's first piece: what a protocol that shows it early needs. */
export interface TurnPrompt {
  type: "prompt";
  promptTokens: number;
  cachedTokens: number;
}

/** The log-probabilities of answer tokens whose text has been given, in order. */
export interface TurnLogprobs {
  type: "logprobs";
  entries: TokenLogprob[];
}

/** A reply's token counts; each protocol reports them in its own words. */
export interface Usage {
  promptTokens: number;
  completionTokens: number;
  /** Of `promptTokens`, those a sequence's KV cache already held. */
  cachedTokens: number;
  /** Of `completionTokens`, the thought's (its markers too). */
  reasoningTokens: number;
}

/** A reply cancelled before its first token: nothing said, nothing counted. */
export const NO_REPLY: GenerateResult = Object.freeze({
  text: "",
  finishReason: "cancelled",
  promptTokens: 0,
  completionTokens: 0,
  cachedTokens: 0,
  reasoningTokens: 0,
  prompt: "",
});

export const usageOf = ({ promptTokens, completionTokens, cachedTokens, reasoningTokens }: GenerateResult): Usage => ({
  promptTokens,
  completionTokens,
  cachedTokens,
  reasoningTokens,
});

/** Nothing counted: a turn that never replied. */
export const NO_USAGE: Usage = Object.freeze(usageOf(NO_REPLY));

/** The refusal while there is no engine yet; readiness reports it too. */
export const modelLoading = () => new Overloaded("the model is still loading", 5_000);

export const shuttingDown = () => new Overloaded("the server is shutting down", 5_000);

/** A model as listings show it. */
export interface ModelInfo {
  id: string;
  /** Unix seconds: OpenAI's model listing shows when a model was "created". */
  created: number;
  loaded: boolean;
  /** Whether it sees the pictures in turns (it has a projector). */
  vision: boolean;
  /** Loaded: when it unloads unless used meanwhile, in milliseconds since the epoch (Infinity: never). */
  expiresAt?: number;
  /** Loaded: whether its replies' thoughts are told apart (`Engine.thinks`); unknown until it is. */
  thinks?: boolean;
  /** Loaded: whether it fills in the middle (`Engine.infills`); unknown until it is. */
  infills?: boolean;
  /** What its file says of it, where the service read it (not for an engine given whole). */
  file?: ModelFile;
}

/** A model file's facts, as a model listing shows them. */
export interface ModelFile {
  architecture?: string;
  sizeBytes: number;
  /** llama-quantize's name of its type (Q4_K_M, F16…). */
  quantization: string;
  parameters: number;
  chatTemplate?: string;
  /** What the model is for: replies, embeddings or ranking. */
  purpose: ModelPurpose;
  /** Its header's metadata, as the registry keeps it: the keys of one value (its lists left out). */
  metadata: Readonly<Record<string, GgufValue>>;
}

/**
 * Where turns find the engine of the model they name: held for the turn (a model with replies in
 * hand stays loaded).
 */
export interface EngineSource {
  /**
   * The engine of `model` (the default when absent), loaded if need be. Refuses with `Overloaded`
   * while it cannot be had now (still loading at the start, shutting down), `ModelNotFound` for a
   * model the service does not have.
   */
  hold(model: string | undefined, signal?: AbortSignal, keepAliveMs?: number): Promise<HeldEngine>;
  /** The engines loaded now. */
  loaded(): readonly Engine[];
  /** Drops what every model keeps of a conversation, loaded or not (see `Engine.forget`). */
  forget(conversationKey: string): Promise<void>;
  /** Every model the service has, the default first. */
  list(): ModelInfo[];
}

/** One engine, or none yet (`modelLoading`): a service of one model loaded from the start. */
export const oneEngine = (current: () => Engine | undefined): EngineSource => ({
  async hold() {
    const engine = current();
    if (!engine) throw modelLoading();
    return { engine, release() {} };
  },
  loaded: () => {
    const engine = current();
    return engine ? [engine] : [];
  },
  list: () => {
    const engine = current();
    return engine
      ? [
          {
            id: engine.modelName,
            created: engine.loadedAt,
            loaded: true,
            vision: engine.seesImages,
            expiresAt: Number.POSITIVE_INFINITY,
            thinks: engine.thinks,
            infills: engine.infills,
          },
        ]
      : [];
  },
  forget: async (conversationKey) => {
    await current()?.forget(conversationKey);
  },
});

export interface TurnRunnerOptions {
  /** Wall-clock cap on one reply, counted from its first token; 0 = none. The reply is kept as `length`. */
  generationTimeoutMs?: number;
  /** How long `close()` lets running replies finish before it cancels them. */
  shutdownGraceMs?: number;
  /** Where every reply's tokens are counted to its user, and budgets held, whatever protocol asked for it. */
  ledger?: TokenLedger;
  /** A reply's tokens that could not be counted (or its hold ended): the reply itself stands. */
  onLedgerError?: (error: unknown) => void;
}

/** What a turn's caller hands it besides its request. */
export interface TurnHooks {
  /** The model to answer: its id (or an alias); absent, the default. */
  model?: string | undefined;
  /** Aborts when the caller is gone. */
  signal?: AbortSignal;
  /** How long the model stays loaded once idle after this request, as its client asks (within the operator's keep-alive). */
  keepAliveMs?: number;
  /** The user's budget, where a quota applies: once the turn holds its share, and after it settles. */
  onQuota?: (state: QuotaState) => void;
  /** Pictures of the stored history that the model could not be shown, left out of the prompt. */
  onPicturesLeftOut?: (count: number) => void;
}

/** What a reply is asked for, before the turn gives it its signal and budget. */
export type ReplyRequest = Omit<GenerateRequest, "signal" | "budget" | "measured">;

/**
 * One reply being generated. Its `signal` aborts when the caller's signal does (a client gone),
 * when the generation cap runs out, or when shutdown cancels it; each ends generation the same
 * way, keeping the partial reply.
 */
export class RunningTurn {
  readonly signal: AbortSignal;
  private readonly cancelled = new AbortController();
  private readonly capped = new AbortController();
  private cap: Timer | undefined;
  private admitted = false;
  /** Its share of the user's budget until settled; none when no quota applies. */
  private hold: TokenHold | undefined;
  /** The prompt the quota was measured on, which the reply evaluates without fitting it again. */
  private measured: Measured | undefined;

  constructor(
    readonly engine: Engine,
    /** Whose reply it is: its tokens are counted to this user. */
    private readonly userId: number,
    private readonly hooks: TurnHooks,
    private readonly options: TurnRunnerOptions,
    private readonly onEnd: (turn: RunningTurn) => void,
  ) {
    const signals = [this.cancelled.signal, this.capped.signal];
    this.signal = AbortSignal.any(hooks.signal ? [...signals, hooks.signal] : signals);
  }

  /**
   * Holds the reply's share of its user's budget, or refuses it (`QuotaExceeded`): call before
   * anything of the turn is stored, with the request `reply` will get. The share is the prompt and
   * as many reply tokens as it asks, as far as the budget goes.
   */
  async admit(request: ReplyRequest): Promise<void> {
    const { ledger } = this.options;
    this.admitted = true;
    const rule = await ledger?.rule(this.userId);
    if (!ledger || !rule) return;
    // A turn with tools admits each of its model turns: the last one measured is the one replying.
    this.measured?.release();
    this.measured = await this.engine.measure(request);
    const prompt = this.measured.tokens;
    const { hold, state } = await ledger.hold(this.userId, rule, prompt + 1, prompt + replyRoom(request.maxTokens, this.engine.contextSize, prompt));
    this.hold = hold;
    this.hooks.onQuota?.(state);
  }

  /** Arms the generation cap at the reply's first token; later calls (every token) cost nothing. */
  tokenArrived(): void {
    const capMs = this.options.generationTimeoutMs ?? 0;
    if (this.cap !== undefined || capMs <= 0) return;
    this.cap = setTimeout(() => this.capped.abort(), capMs);
  }

  /** A reply cut by the cap, not by its client or a shutdown, is as complete as it will get: `length`. */
  finishReason(reason: FinishReason): FinishReason {
    return reason === "cancelled" && this.capped.signal.aborted && !this.cancelled.signal.aborted ? "length" : reason;
  }

  /** Cancelled by the runner's `close()`, not by its caller. */
  get closed(): boolean {
    return this.cancelled.signal.aborted;
  }

  /**
   * Generates the reply under this turn's signal: yields its pieces, a reasoning model's thought
   * before the answer (arming the cap at the first), returns the result with its final finish
   * reason, or undefined when the client left before generation began. A turn the runner's
   * `close()` cancels while it waits for a sequence still ends in a reply: empty and `cancelled`.
   * A consumer that stops early hands the sequence back.
   */
  reply(request: Omit<ReplyRequest, "tools" | "logprobs">): AsyncGenerator<TurnDelta | TurnReasoning, GenerateResult | undefined, void>;
  reply(request: ReplyRequest): AsyncGenerator<TurnEvent, GenerateResult | undefined, void>;
  async *reply(request: ReplyRequest): AsyncGenerator<TurnEvent, GenerateResult | undefined, void> {
    if (!this.admitted) throw new Error("a turn's reply runs once admitted");
    const budget = this.hold?.tokens;
    const { measured } = this;
    const generation = this.engine.generate({
      ...request,
      signal: this.signal,
      ...(budget !== undefined ? { budget } : {}),
      ...(measured ? { measured } : {}),
    });
    let result: GenerateResult | undefined;
    try {
      for (;;) {
        const step = await generation.next();
        if (step.done) {
          result = step.value;
          // Assigned, not spread: spreading would render the lazy `prompt`.
          result.finishReason = this.finishReason(result.finishReason);
          await this.count(result);
          return result;
        }
        const piece = step.value;
        if (piece.kind === "logprobs") {
          yield { type: "logprobs", entries: piece.entries };
          continue;
        }
        if (piece.kind === "prompt") {
          yield { type: "prompt", promptTokens: piece.tokens, cachedTokens: piece.cachedTokens };
          continue;
        }
        this.tokenArrived();
        yield piece.kind === "toolCall"
          ? { type: "toolCall", part: piece.part }
          : { type: piece.kind === "reasoning" ? "reasoning" : "delta", content: piece.text };
      }
    } catch (error) {
      // A prompt longer than measured (a held conversation's other window) that the hold cannot cover.
      if (error instanceof BudgetExceeded && this.hold) throw this.options.ledger!.outgrown(this.hold, error.promptTokens);
      if (!isAbort(error)) throw error;
      if (!this.closed) return undefined;
      return NO_REPLY;
    } finally {
      if (result === undefined) await generation.return(undefined as never);
    }
  }

  /** Counts the reply's tokens, a cancelled one's as far as it got, to its user, and ends its hold. */
  private async count({ promptTokens, completionTokens }: GenerateResult): Promise<void> {
    const { ledger } = this.options;
    if (!ledger) return;
    const hold = this.hold;
    this.hold = undefined;
    try {
      const state = await ledger.settle(this.userId, hold, promptTokens, completionTokens);
      if (state) this.hooks.onQuota?.(state);
    } catch (error) {
      this.options.onLedgerError?.(error);
    }
  }

  cancel(reason: unknown): void {
    this.cancelled.abort(reason);
  }

  /** Idempotent. A hold its reply never settled (refused, failed, left before it began) is given back. */
  end(): void {
    clearTimeout(this.cap);
    this.measured?.release();
    if (this.hold) void this.options.ledger?.release(this.hold).catch((error: unknown) => this.options.onLedgerError?.(error));
    this.hold = undefined;
    this.onEnd(this);
  }
}

/**
 * What every reply shares, whatever protocol asked for it and whether it is stored: admission
 * (refused before anything is stored), its cancellation, and the replies in flight that closing
 * waits for.
 */
export class TurnRunner {
  private readonly inFlight = new Set<RunningTurn>();
  private idleWaiters: (() => void)[] = [];
  private closing = false;

  constructor(
    /** Also where work besides turns (forgetting a deleted conversation) finds the engine. */
    readonly engines: EngineSource,
    private readonly options: TurnRunnerOptions = {},
  ) {}

  /**
   * Admits a turn of `userId`'s, with the engine of the model it names held for it, or refuses it
   * up front: no such model, none loaded yet, closing, or no room. Call `end()` when done.
   */
  async begin(userId: number, hooks: TurnHooks = {}): Promise<RunningTurn> {
    if (this.closing) throw shuttingDown();
    const held = await this.engines.hold(hooks.model, hooks.signal, hooks.keepAliveMs);
    try {
      if (this.closing) throw shuttingDown();
      const { engine } = held;
      // Every admitted turn counts, also one waiting for its conversation's previous turn: otherwise
      // requests to one busy conversation would queue without bound.
      let onEngine = 0;
      for (const turn of this.inFlight) if (turn.engine === engine) onEngine++;
      if (onEngine >= engine.capacity) throw new Overloaded("too many requests are waiting for the model", 2_000);
      return this.admitted(userId, hooks, held);
    } catch (error) {
      held.release();
      throw error;
    }
  }

  private admitted(userId: number, hooks: TurnHooks, held: HeldEngine): RunningTurn {
    const turn = new RunningTurn(held.engine, userId, hooks, this.options, (ended) => {
      held.release();
      this.inFlight.delete(ended);
      if (this.inFlight.size === 0) for (const resolve of this.idleWaiters.splice(0)) resolve();
    });
    this.inFlight.add(turn);
    return turn;
  }

  get activeTurns(): number {
    return this.inFlight.size;
  }

  /**
   * Refuses new turns, lets running ones finish for the grace period, then cancels the rest
   * (their partial replies are kept as `cancelled`) and resolves once every one has ended.
   */
  async close(): Promise<void> {
    this.closing = true;
    let timer: Timer | undefined;
    const grace = new Promise<void>((resolve) => (timer = setTimeout(resolve, this.options.shutdownGraceMs ?? 0)));
    await Promise.race([this.idle(), grace]);
    clearTimeout(timer);
    for (const turn of this.inFlight) turn.cancel(new DOMException("the server is shutting down", "AbortError"));
    await this.idle();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private idle(): Promise<void> {
    return this.inFlight.size === 0 ? Promise.resolve() : new Promise((resolve) => this.idleWaiters.push(resolve));
  }
}
