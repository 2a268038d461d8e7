import type { Db } from "../db/client";
import { conversationTurns, ensureConversation, insertMessage } from "../db/conversations";
import type { MessageRecord } from "../db/messages";
import { Overloaded } from "../errors";
import type { Engine, GenerateResult } from "../llm/engine";
import { KeyedLock } from "./keyed-lock";

export interface TurnInput {
  userId: number;
  conversationId: string;
  message: string;
  temperature: number;
  maxTokens: number;
  seed?: number;
  /** Aborts when the client goes away: waiting stops, generation stops, the partial reply is kept. */
  signal?: AbortSignal;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  cached_tokens: number;
}

export interface TurnStart {
  type: "start";
  conversationId: string;
  newConversation: boolean;
  userMessage: MessageRecord;
  model: string;
}

export interface TurnDelta {
  type: "delta";
  content: string;
}

export interface TurnResult {
  conversationId: string;
  newConversation: boolean;
  message: MessageRecord;
  userMessage: MessageRecord;
  usage: Usage;
  model: string;
}

/** Where the service finds the engine: absent while the model is still loading. */
export interface EngineSource {
  current(): Engine | undefined;
}

/** The refusal while there is no engine yet; readiness reports it too. */
export const modelLoading = () => new Overloaded("the model is still loading", 5_000);

const isAbort = (error: unknown) => error instanceof Error && error.name === "AbortError";

export interface ChatServiceOptions {
  /** Wall-clock cap on one reply, counted from its first token; 0 = none. The reply is kept as `length`. */
  generationTimeoutMs?: number;
}

/**
 * A conversation turn: store the user's message, generate from the stored history, store the
 * reply. Knows storage and the engine, nothing of HTTP.
 */
export class ChatService {
  private readonly turns = new KeyedLock();
  /** One per running turn: aborting it cancels the turn the way a client disconnect does. */
  private readonly inFlight = new Set<AbortController>();
  private idleWaiters: (() => void)[] = [];
  private closing = false;

  constructor(
    private readonly db: Db,
    private readonly engines: EngineSource,
    private readonly options: ChatServiceOptions = {},
  ) {}

  /**
   * Yields `start` once the user's message is stored, then `delta`s; returns the stored reply.
   * Returns undefined when the client left before generation began (no reply is stored then).
   */
  async *turn(input: TurnInput): AsyncGenerator<TurnStart | TurnDelta, TurnResult | undefined, void> {
    const engine = this.admit();
    const cancel = new AbortController();
    const timeout = new AbortController();
    this.inFlight.add(cancel);
    try {
      const signals = [cancel.signal, timeout.signal, ...(input.signal ? [input.signal] : [])];
      return yield* this.run(engine, { ...input, signal: AbortSignal.any(signals) }, () => this.startTimeout(timeout), timeout.signal);
    } finally {
      timeout.abort();
      this.inFlight.delete(cancel);
      if (this.inFlight.size === 0) for (const resolve of this.idleWaiters.splice(0)) resolve();
    }
  }

  /**
   * Refuses new turns, lets running ones finish for up to `graceMs`, then cancels the rest
   * (their partial replies are stored as `cancelled`) and resolves once all are stored.
   */
  async shutdown(graceMs: number): Promise<void> {
    this.closing = true;
    let timer: Timer | undefined;
    await Promise.race([this.idle(), new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)))]);
    clearTimeout(timer);
    for (const cancel of this.inFlight) cancel.abort(new DOMException("the server is shutting down", "AbortError"));
    await this.idle();
  }

  get activeTurns(): number {
    return this.inFlight.size;
  }

  private idle(): Promise<void> {
    return this.inFlight.size === 0 ? Promise.resolve() : new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private startTimeout(timeout: AbortController): void {
    const ms = this.options.generationTimeoutMs ?? 0;
    if (ms <= 0 || timeout.signal.aborted) return;
    const timer = setTimeout(() => timeout.abort(), ms);
    timeout.signal.addEventListener("abort", () => clearTimeout(timer), { once: true });
  }

  private async *run(
    engine: Engine,
    input: TurnInput & { signal: AbortSignal },
    firstToken: () => void,
    timedOut: AbortSignal,
  ): AsyncGenerator<TurnStart | TurnDelta, TurnResult | undefined, void> {
    let release: () => void;
    try {
      release = await this.turns.acquire(`${input.userId}\u0000${input.conversationId}`, input.signal);
    } catch (error) {
      if (isAbort(error)) return undefined;
      throw error;
    }
    try {
      const conversation = ensureConversation(this.db, input.userId, input.conversationId);
      const userMessage = insertMessage(this.db, conversation, { role: "user", content: input.message });
      yield {
        type: "start",
        conversationId: input.conversationId,
        newConversation: conversation.created,
        userMessage,
        model: engine.modelName,
      };

      const generation = engine.generate({
        conversationKey: String(conversation.id),
        history: conversationTurns(this.db, conversation.id),
        temperature: input.temperature,
        maxTokens: input.maxTokens,
        seed: input.seed,
        signal: input.signal,
      });
      let result: GenerateResult | undefined;
      try {
        for (;;) {
          const step = await generation.next();
          if (step.done) {
            result = step.value;
            break;
          }
          firstToken();
          yield { type: "delta", content: step.value };
        }
      } catch (error) {
        if (isAbort(error)) return undefined;
        throw error;
      } finally {
        // Only when our consumer stopped early: hand the engine's sequence back.
        if (result === undefined) await generation.return(undefined as never);
      }

      // Cut by the time cap rather than by the client: the reply is as complete as it will get.
      const finishReason = result.finishReason === "cancelled" && timedOut.aborted && !this.closing ? "length" : result.finishReason;
      const message = insertMessage(this.db, conversation, {
        role: "assistant",
        content: result.text,
        finishReason,
        promptTokens: result.promptTokens,
        completionTokens: result.completionTokens,
        cachedTokens: result.cachedTokens,
        temperature: input.temperature,
        model: engine.modelName,
      });
      return {
        conversationId: input.conversationId,
        newConversation: conversation.created,
        message,
        userMessage,
        usage: {
          prompt_tokens: result.promptTokens,
          completion_tokens: result.completionTokens,
          total_tokens: result.promptTokens + result.completionTokens,
          cached_tokens: result.cachedTokens,
        },
        model: engine.modelName,
      };
    } finally {
      release();
    }
  }

  /** Refuses up front, before anything is stored: no engine yet, shutting down, or a full queue. */
  private admit(): Engine {
    const engine = this.engines.current();
    if (!engine) throw modelLoading();
    if (this.closing) throw new Overloaded("the server is shutting down", 5_000);
    if (engine.isFull()) throw new Overloaded("too many requests are waiting for the model", 2_000);
    return engine;
  }
}
