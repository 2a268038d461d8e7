import type { UsageStore } from "../db/storage";
import { isAbort, Overloaded } from "../errors";
import type { Engine, FinishReason, GenerateRequest, GenerateResult, TokenLogprob, ToolCallPart } from "../llm/engine";

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

/** What a reply yields as it is generated. */
export type TurnEvent = TurnDelta | TurnReasoning | TurnToolCall | TurnLogprobs;

/** The log-probabilities of answer tokens whose text has been given, in order. */
export interface TurnLogprobs {
  type: "logprobs";
  entries: TokenLogprob[];
}

/** A reply's token counts, as both APIs report them. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  cached_tokens: number;
}

export const usageOf = (result: GenerateResult): Usage => ({
  prompt_tokens: result.promptTokens,
  completion_tokens: result.completionTokens,
  total_tokens: result.promptTokens + result.completionTokens,
  cached_tokens: result.cachedTokens,
});

/** The refusal while there is no engine yet; readiness reports it too. */
export const modelLoading = () => new Overloaded("the model is still loading", 5_000);

export const shuttingDown = () => new Overloaded("the server is shutting down", 5_000);

/** Where turns find the engine: absent while the model is still loading. */
export interface EngineSource {
  current(): Engine | undefined;
}

export interface TurnRunnerOptions {
  /** Wall-clock cap on one reply, counted from its first token; 0 = none. The reply is kept as `length`. */
  generationTimeoutMs?: number;
  /** How long `close()` lets running replies finish before it cancels them. */
  shutdownGraceMs?: number;
  /** Where every reply's tokens are added to its user's day, whatever protocol asked for it. */
  usage?: Pick<UsageStore, "add">;
  /** A reply's tokens that could not be added: the reply itself stands. */
  onUsageError?: (error: unknown) => void;
}

/** The UTC day of `ms`, as usage is kept: `YYYY-MM-DD`. */
export const usageDay = (ms: number) => new Date(ms).toISOString().slice(0, 10);

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

  constructor(
    readonly engine: Engine,
    /** Whose reply it is: its tokens are counted to this user. */
    private readonly userId: number,
    callerSignal: AbortSignal | undefined,
    private readonly options: TurnRunnerOptions,
    private readonly onEnd: (turn: RunningTurn) => void,
  ) {
    const signals = [this.cancelled.signal, this.capped.signal];
    this.signal = AbortSignal.any(callerSignal ? [...signals, callerSignal] : signals);
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
  reply(request: Omit<GenerateRequest, "signal" | "tools" | "logprobs">): AsyncGenerator<TurnDelta | TurnReasoning, GenerateResult | undefined, void>;
  reply(request: Omit<GenerateRequest, "signal">): AsyncGenerator<TurnEvent, GenerateResult | undefined, void>;
  async *reply(request: Omit<GenerateRequest, "signal">): AsyncGenerator<TurnEvent, GenerateResult | undefined, void> {
    const generation = this.engine.generate({ ...request, signal: this.signal });
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
        this.tokenArrived();
        yield piece.kind === "toolCall" ? { type: "toolCall", part: piece.part } : { type: piece.kind === "reasoning" ? "reasoning" : "delta", content: piece.text };
      }
    } catch (error) {
      if (!isAbort(error)) throw error;
      if (!this.closed) return undefined;
      return { text: "", finishReason: "cancelled", promptTokens: 0, completionTokens: 0, cachedTokens: 0, prompt: "" };
    } finally {
      if (result === undefined) await generation.return(undefined as never);
    }
  }

  /** Adds the reply's tokens, a cancelled one's as far as it got, to its user's day. */
  private async count({ promptTokens, completionTokens }: GenerateResult): Promise<void> {
    const { usage } = this.options;
    if (!usage || promptTokens + completionTokens === 0) return;
    await usage.add(this.userId, usageDay(Date.now()), promptTokens, completionTokens).catch((error: unknown) => this.options.onUsageError?.(error));
  }

  cancel(reason: unknown): void {
    this.cancelled.abort(reason);
  }

  /** Idempotent. */
  end(): void {
    clearTimeout(this.cap);
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

  /** Admits a turn of `userId`'s or refuses it up front: no engine yet, closing, or no room. Call `end()` when done. */
  begin(userId: number, signal?: AbortSignal): RunningTurn {
    const engine = this.engines.current();
    if (!engine) throw modelLoading();
    if (this.closing) throw shuttingDown();
    // Every admitted turn counts, also one waiting for its conversation's previous turn: otherwise
    // requests to one busy conversation would queue without bound.
    if (this.inFlight.size >= engine.capacity) throw new Overloaded("too many requests are waiting for the model", 2_000);
    const turn = new RunningTurn(engine, userId, signal, this.options, (ended) => {
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
