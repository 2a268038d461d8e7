import type { ConversationStore } from "../db/storage";
import type { ConversationRef, FoundConversation, MessageRecord } from "../db/types";
import { holdConversation, type LeaseOptions } from "./conversation-lease";
import type { ReplyFormat, SamplingRequest, Turn } from "../llm/engine";
import { isAbort } from "../errors";
import { KeyedLock } from "./keyed-lock";
import { type RunningTurn, shuttingDown, type TurnDelta, type TurnReasoning, type TurnRunner, type Usage, usageOf } from "./turn-runner";

export type { TurnDelta, TurnReasoning, Usage } from "./turn-runner";

export interface TurnInput {
  userId: number;
  conversationId: string;
  message: string;
  sampling: SamplingRequest;
  maxTokens: number;
  /** What the reply must be (JSON, or JSON of a schema); stored as the reply's text. */
  format?: ReplyFormat | undefined;
  /** Aborts when the client goes away: waiting stops, generation stops, the partial reply is kept. */
  signal?: AbortSignal;
}

export interface TurnStart {
  type: "start";
  conversationId: string;
  newConversation: boolean;
  userMessage: MessageRecord;
  model: string;
}

export interface TurnResult {
  conversationId: string;
  newConversation: boolean;
  message: MessageRecord;
  userMessage: MessageRecord;
  usage: Usage;
  model: string;
}

export interface ChatServiceOptions {
  /**
   * Put before every conversation's history (an operator's persona), never stored: changing it
   * changes the prompt of every conversation from its next turn on, and the engine, whose KV
   * reuse is token-exact, then re-evaluates instead of reusing a transcript made with the old one.
   */
  systemPrompt?: string;
  /** When other processes share the storage: a turn also holds its conversation across them. */
  shared?: LeaseOptions;
}

/** Turns of one conversation, and its deletion, take this lock in arrival order. */
const lockKey = (userId: number, conversationId: string) => `${userId}\u0000${conversationId}`;

/**
 * A wait (for the conversation's previous turn) that was aborted before anything of the turn was
 * stored: the client left (nothing to answer), or the server is closing (503, so it is answered).
 */
function endedWaiting(error: unknown, running: RunningTurn): undefined {
  if (!isAbort(error)) throw error;
  if (running.closed) throw shuttingDown();
  return undefined;
}

/**
 * A conversation turn: store the user's message, generate from the stored history, store the
 * reply. Knows storage and the engine, nothing of HTTP; the runner admits and cancels turns.
 */
export class ChatService {
  private readonly turns = new KeyedLock();
  private readonly preamble: Turn[];
  private readonly shared: LeaseOptions | undefined;

  constructor(
    private readonly conversations: ConversationStore,
    private readonly runner: TurnRunner,
    options: ChatServiceOptions = {},
  ) {
    this.preamble = options.systemPrompt ? [{ role: "system", content: options.systemPrompt }] : [];
    this.shared = options.shared;
  }

  /**
   * Deletes the user's conversation: its stored messages, then what the engine keeps of it. Waits
   * behind the conversation's turns (a running reply finishes and is stored first, then deleted
   * with the rest), so nothing is left half-deleted; turns that arrive later start it afresh.
   * False when the user has no such conversation. An abort while waiting deletes nothing.
   */
  async delete(userId: number, conversationId: string, signal?: AbortSignal): Promise<boolean> {
    const release = await this.turns.acquire(lockKey(userId, conversationId), signal);
    let releaseLease: (() => Promise<void>) | undefined;
    try {
      if (this.shared) {
        // A turn of it on another node is waited out through the same lease its turns hold.
        const found = await this.conversations.find(userId, conversationId);
        if (!found) return false;
        releaseLease = await holdConversation(this.shared, found.id, signal);
      }
      const deleted = await this.conversations.delete(userId, conversationId);
      if (!deleted) return false;
      // Without an engine yet, a saved state stays until evicted. It is never wrongly reused: a
      // state is used only for a prompt that starts with exactly its text.
      await this.runner.engines.current()?.forget(String(deleted.id));
      return true;
    } finally {
      await releaseLease?.();
      release();
    }
  }

  /**
   * The user's conversation, created on first use, and with several nodes its lease held. Deleted
   * on another node between finding it and taking its lease, it is found (created) again: its
   * turn must not add to a deleted conversation.
   */
  private async holdCurrent(input: TurnInput, signal: AbortSignal): Promise<{ conversation: FoundConversation; releaseLease?: () => Promise<void> }> {
    let conversation = await this.conversations.findOrCreate(input.userId, input.conversationId);
    if (!this.shared) return { conversation };
    for (;;) {
      const releaseLease = await holdConversation(this.shared, conversation.id, signal);
      let current: ConversationRef | undefined;
      try {
        current = await this.conversations.find(input.userId, input.conversationId);
      } catch (error) {
        await releaseLease();
        throw error;
      }
      if (current?.id === conversation.id) return { conversation, releaseLease };
      await releaseLease();
      conversation = await this.conversations.findOrCreate(input.userId, input.conversationId);
    }
  }

  /**
   * Yields `start` once the user's message is stored, then `reasoning` pieces of a reasoning model's
   * thought, then `delta`s; returns the stored reply.
   * Returns undefined when the client left before generation began (no reply is stored then).
   * A turn the server cancels while it waits still ends in an answer: `Overloaded` before its
   * message is stored, an empty `cancelled` reply after.
   */
  async *turn(input: TurnInput): AsyncGenerator<TurnStart | TurnReasoning | TurnDelta, TurnResult | undefined, void> {
    const running = this.runner.begin(input.signal);
    try {
      return yield* this.run(running, input);
    } finally {
      running.end();
    }
  }

  private async *run(running: RunningTurn, input: TurnInput): AsyncGenerator<TurnStart | TurnReasoning | TurnDelta, TurnResult | undefined, void> {
    const { engine, signal } = running;
    // Refused before the message is stored: nothing of a turn that cannot run is kept.
    await engine.check({ ...input.sampling, format: input.format });
    let release: () => void;
    try {
      release = await this.turns.acquire(lockKey(input.userId, input.conversationId), signal);
    } catch (error) {
      return endedWaiting(error, running);
    }
    let releaseLease: (() => Promise<void>) | undefined;
    try {
      let conversation: FoundConversation;
      try {
        ({ conversation, releaseLease } = await this.holdCurrent(input, signal));
      } catch (error) {
        return endedWaiting(error, running);
      }
      const userMessage = await this.conversations.addMessage(conversation, { role: "user", content: input.message });
      yield {
        type: "start",
        conversationId: input.conversationId,
        newConversation: conversation.created,
        userMessage,
        model: engine.modelName,
      };

      const result = yield* running.reply({
        conversationKey: String(conversation.id),
        cacheScope: String(input.userId),
        publicTurns: this.preamble.length,
        history: [...this.preamble, ...(await this.conversations.recentTurns(conversation.id, { maxChars: engine.historyChars }))],
        ...input.sampling,
        maxTokens: input.maxTokens,
        format: input.format,
      });
      if (result === undefined) return undefined;

      const message = await this.conversations.addMessage(conversation, {
        role: "assistant",
        content: result.text,
        reasoning: result.reasoning ?? null,
        finishReason: result.finishReason,
        promptTokens: result.promptTokens,
        completionTokens: result.completionTokens,
        cachedTokens: result.cachedTokens,
        temperature: input.sampling.temperature,
        model: engine.modelName,
      });
      return {
        conversationId: input.conversationId,
        newConversation: conversation.created,
        message,
        userMessage,
        usage: usageOf(result),
        model: engine.modelName,
      };
    } finally {
      await releaseLease?.();
      release();
    }
  }
}
