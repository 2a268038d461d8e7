import type { ConversationStore } from "../db/storage";
import { type ConversationItem, type ConversationRef, type FoundConversation, type MessageRecord, newItemId, type StoredConversation } from "../db/types";
import { isAbort, NotFound } from "../errors";
import type { ReplyFormat, SamplingRequest, ToolRequest, Turn, TurnImage } from "../llm/engine";
import { type McpServers, NO_MCP_SERVERS } from "../mcp/servers";
import { type CompletionResult, completionOf } from "./completions";
import { itemRows, rowItems } from "./conversation-items";
import { holdConversation, type LeaseOptions } from "./conversation-lease";
import { historyOf, newStem, replyItems, storedImages, turnImages } from "./items";
import { KeyedLock } from "./keyed-lock";
import { PICTURE_LIMITS } from "./pictures";
import { type LoopResult, type ServerTools, serverToolLoop } from "./server-tools";
import {
  NO_USAGE,
  type ReplyRequest,
  type RunningTurn,
  shuttingDown,
  type TurnDelta,
  type TurnEvent,
  type TurnHooks,
  type TurnReasoning,
  type TurnRunner,
  type TurnServerTool,
  type Usage,
} from "./turn-runner";

export type { TurnDelta, TurnReasoning, Usage } from "./turn-runner";

/** Its `signal` aborts when the client goes away: waiting stops, generation stops, the partial reply is kept. */
export interface TurnInput extends TurnHooks {
  userId: number;
  conversationId: string;
  message: string;
  /** The message's pictures, each where it stands in its text. */
  images?: readonly TurnImage[];
  sampling: SamplingRequest;
  maxTokens: number;
  /** What the reply must be (JSON, or JSON of a schema); stored as the reply's text. */
  format?: ReplyFormat | undefined;
  /** Listed MCP servers whose tools the turn runs itself (server-tools.ts), its items named by `stem`. */
  serverTools?: ServerTools & { stem: string };
}

/** A call the turn made of a server's tool, as stored. */
export type ServerCall = Extract<ConversationItem, { type: "serverCall" }>;

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
  /** The calls of servers' tools the turn made before its reply, in order (stored before it). */
  serverCalls: ServerCall[];
  usage: Usage;
  model: string;
}

/**
 * A turn of a conversation in items: what it adds before the reply, and how the reply is stored.
 * The native turn is one user message in, one assistant message out.
 */
export interface ConversationTurnInput extends TurnHooks {
  userId: number;
  conversationId: string;
  /** Stored first, in order, once the turn is admitted. */
  input: ConversationItem[];
  /** A system turn before the history, for this turn only (never stored). */
  instructions?: string;
  /** Start the conversation when the user has none by this id; else `NotFound`. */
  create: boolean;
  /** The items the reply is stored as (their ids are the caller's): a model turn's, or a loop's with the items it made. */
  output: (reply: CompletionResult | LoopResult) => ConversationItem[];
  sampling: SamplingRequest;
  /** Absent: as long as the context allows. */
  maxTokens?: number | undefined;
  format?: ReplyFormat | undefined;
  tools?: ToolRequest | undefined;
  /**
   * Listed MCP servers' tools the turn runs itself (server-tools.ts): its model turns run one after
   * another under the conversation's lock, each seeing the calls before it; the loop's items are stored with the reply.
   */
  serverTools?: (ServerTools & { stem: string }) | undefined;
}

export interface ConversationTurnStart {
  type: "start";
  conversation: FoundConversation;
  /** The input as stored. */
  stored: MessageRecord[];
  model: string;
}

export interface ConversationTurnResult {
  conversation: FoundConversation;
  /** The reply as generated (undefined: the client left before generation began). */
  reply: CompletionResult | LoopResult | undefined;
  /** The input, then the reply, as stored. */
  stored: MessageRecord[];
  /** The reply as stored. */
  output: MessageRecord[];
  /** Of `output`, the assistant message with the reply's statistics; absent when it has none. */
  answer: MessageRecord | undefined;
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
  /** The operator's MCP servers, whose tools a turn may run. */
  servers?: McpServers;
}

/** A turn under way: the conversation it holds, and once its input is stored, that. */
interface OpenTurn {
  running: RunningTurn;
  input: ConversationTurnInput;
  held: HeldConversation | undefined;
  opened?: { conversation: FoundConversation; stored: MessageRecord[] };
}

/** A conversation a turn runs in, with its lease across nodes when it holds one. */
interface HeldConversation {
  conversation: FoundConversation;
  releaseLease?: () => Promise<void>;
}

/** The operator's turns before every conversation's history: its system prompt, if any. */
export const preambleOf = (systemPrompt: string | undefined): Turn[] => (systemPrompt ? [{ role: "system", content: systemPrompt }] : []);

/** The items' pictures, in order, as turns hold them. */
const picturesOf = (items: readonly ConversationItem[]): TurnImage[] =>
  items.flatMap((item) => (item.type === "message" ? (turnImages(item.images).images ?? []) : []));

/**
 * Stored items with the pictures the model cannot be shown left out (a model that sees none, or a
 * picture its projector cannot decode): a turn's own pictures are checked before it is stored,
 * but a conversation may hold pictures from another model or from its items' API, and one such
 * picture must not make every later turn of it unanswerable. Of the rest, as many as a request may
 * send are shown, the newest: laying out (decoding) every picture a long conversation holds would
 * be work no request's limits bound. Each left out is counted to `onLeftOut`.
 */
async function seenPictures(
  items: ConversationItem[],
  engine: RunningTurn["engine"],
  scope: string,
  onLeftOut: ((count: number) => void) | undefined,
): Promise<ConversationItem[]> {
  const pictures = picturesOf(items);
  if (pictures.length === 0) return items;
  const older = Math.max(0, pictures.length - PICTURE_LIMITS.perRequest);
  const seen = [...pictures.slice(0, older).map(() => false), ...(await engine.seeable(pictures.slice(older), scope))];
  const leftOut = seen.filter((shown) => !shown).length;
  if (leftOut === 0) return items;
  onLeftOut?.(leftOut);
  let next = 0;
  return items.map((item) => {
    if (item.type !== "message" || !item.images?.length) return item;
    const { images, ...rest } = item;
    const shown = images.filter(() => seen[next++]);
    return shown.length > 0 ? { ...rest, images: shown } : rest;
  });
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
  private readonly servers: McpServers;

  constructor(
    private readonly conversations: ConversationStore,
    private readonly runner: TurnRunner,
    options: ChatServiceOptions = {},
  ) {
    this.preamble = preambleOf(options.systemPrompt);
    this.shared = options.shared;
    this.servers = options.servers ?? NO_MCP_SERVERS;
  }

  /**
   * Deletes the user's conversation: its stored messages, then what the engine keeps of it. Waits
   * behind the conversation's turns (a running reply finishes and is stored first, then deleted
   * with the rest), so nothing is left half-deleted; turns that arrive later start it afresh.
   * False when the user has no such conversation. An abort while waiting deletes nothing.
   */
  async delete(userId: number, conversationId: string, signal?: AbortSignal): Promise<boolean> {
    const deleted = await this.exclusive(userId, conversationId, signal, async () => {
      const gone = await this.conversations.delete(userId, conversationId);
      // Every model's saved states go too, loaded or not, so a model loaded later finds none.
      if (gone) await this.runner.engines.forget(String(gone.id));
      return gone !== undefined;
    });
    return deleted === true;
  }

  /**
   * Runs `change` on the user's conversation between its turns: behind the turns waiting here, and
   * with several nodes under its lease. Undefined when the user has no conversation by this id.
   */
  async exclusive<T>(
    userId: number,
    conversationId: string,
    signal: AbortSignal | undefined,
    change: (conversation: StoredConversation) => Promise<T>,
  ): Promise<T | undefined> {
    const release = await this.turns.acquire(lockKey(userId, conversationId), signal);
    let releaseLease: (() => Promise<void>) | undefined;
    try {
      const found = await this.conversations.find(userId, conversationId);
      if (!found) return undefined;
      // A turn of it on another node is waited out through the same lease its turns hold.
      if (this.shared) releaseLease = await holdConversation(this.shared, found.id, signal);
      return await change(found);
    } finally {
      await releaseLease?.();
      release();
    }
  }

  /**
   * The user's conversation (created when `create`, else undefined when there is none; `NotFound`
   * when the turn may not start one), and with several nodes its lease held. Deleted on another
   * node between finding it and taking its lease, it is found (created) again: its turn must not
   * add to a deleted conversation.
   */
  private async holdCurrent(input: ConversationTurnInput, signal: AbortSignal, create: boolean): Promise<HeldConversation | undefined> {
    const find = async (): Promise<FoundConversation | undefined> => {
      if (create) return this.conversations.findOrCreate(input.userId, input.conversationId);
      const found = await this.conversations.find(input.userId, input.conversationId);
      if (found) return { ...found, created: false };
      if (input.create) return undefined;
      throw new NotFound(`no conversation ${JSON.stringify(input.conversationId)}`);
    };
    let conversation = await find();
    if (!this.shared || !conversation) return conversation && { conversation };
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
      conversation = await find();
      if (!conversation) return undefined;
    }
  }

  /** What the engine is asked for the turn: the conversation's newest stored turns, then the input. */
  private async request(input: ConversationTurnInput, engine: RunningTurn["engine"], conversation: FoundConversation | undefined): Promise<ReplyRequest> {
    const rows = conversation ? await this.conversations.recentTurns(conversation.id, { maxChars: engine.historyChars }) : [];
    const earlier = await seenPictures(
      rows.flatMap((row) => rowItems({ itemId: "", ...row })),
      engine,
      String(input.userId),
      input.onPicturesLeftOut,
    );
    const instructions: Turn[] = input.instructions ? [{ role: "system", content: input.instructions }] : [];
    return {
      conversationKey: conversation ? String(conversation.id) : undefined,
      cacheScope: String(input.userId),
      publicTurns: this.preamble.length,
      history: [...this.preamble, ...instructions, ...historyOf(undefined, earlier, input.input)],
      ...input.sampling,
      maxTokens: input.maxTokens ?? engine.contextSize,
      format: input.format,
      tools: input.tools,
    };
  }

  /**
   * Yields `start` once the user's message is stored, then `reasoning` pieces of a reasoning model's
   * thought, then `delta`s (and with server tools, their calls and results); returns the stored reply.
   * Returns undefined when the client left before generation began (no reply is stored then).
   * A turn the server cancels while it waits still ends in an answer: `Overloaded` before its
   * message is stored, an empty `cancelled` reply after.
   */
  async *turn(input: TurnInput): AsyncGenerator<TurnStart | TurnReasoning | TurnDelta | TurnServerTool, TurnResult | undefined, void> {
    const stem = input.serverTools?.stem ?? newStem();
    const turn = this.converse({
      userId: input.userId,
      conversationId: input.conversationId,
      input: [{ type: "message", id: newItemId(), role: "user", text: input.message, ...storedImages(input.images) }],
      create: true,
      output: (reply) => ("items" in reply ? answerAfterCalls(stem, reply.items) : replyItems(stem, reply)),
      sampling: input.sampling,
      maxTokens: input.maxTokens,
      format: input.format,
      serverTools: input.serverTools,
      ...(input.signal ? { signal: input.signal } : {}),
      ...(input.onQuota ? { onQuota: input.onQuota } : {}),
      ...(input.onPicturesLeftOut ? { onPicturesLeftOut: input.onPicturesLeftOut } : {}),
      ...(input.model !== undefined ? { model: input.model } : {}),
    });
    for (;;) {
      const step = await turn.next();
      if (step.done) {
        const ended = step.value;
        if (ended?.reply === undefined) return undefined;
        return {
          conversationId: input.conversationId,
          newConversation: ended.conversation.created,
          message: ended.answer!,
          userMessage: ended.stored[0]!,
          serverCalls: "items" in ended.reply ? ended.reply.items.filter((item): item is ServerCall => item.type === "serverCall") : [],
          usage: ended.usage,
          model: ended.model,
        };
      }
      const event = step.value;
      if (event.type === "start") {
        yield {
          type: "start",
          conversationId: input.conversationId,
          newConversation: event.conversation.created,
          userMessage: event.stored[0]!,
          model: event.model,
        };
      } else if (event.type === "delta" || event.type === "reasoning" || event.type === "serverTool") yield event;
    }
  }

  /**
   * A turn in items: yields `start` once its input is stored, then the reply's pieces; returns
   * what was stored. Undefined when the client left before its input was stored.
   */
  async *converse(input: ConversationTurnInput): AsyncGenerator<ConversationTurnStart | TurnEvent, ConversationTurnResult | undefined, void> {
    const running = await this.runner.begin(input.userId, input);
    try {
      return yield* this.run(running, input);
    } finally {
      running.end();
    }
  }

  private async *run(
    running: RunningTurn,
    input: ConversationTurnInput,
  ): AsyncGenerator<ConversationTurnStart | TurnEvent, ConversationTurnResult | undefined, void> {
    const { engine, signal } = running;
    // Refused before anything is stored: nothing of a turn that cannot run is kept.
    await engine.check({
      ...input.sampling,
      format: input.format,
      tools: input.tools,
      maxTokens: input.maxTokens ?? engine.contextSize,
      cacheScope: String(input.userId),
      images: picturesOf(input.input),
    });
    let release: () => void;
    try {
      release = await this.turns.acquire(lockKey(input.userId, input.conversationId), signal);
    } catch (error) {
      return endedWaiting(error, running);
    }
    const turn: OpenTurn = { running, input, held: undefined };
    try {
      try {
        turn.held = await this.holdCurrent(input, signal, false);
      } catch (error) {
        return endedWaiting(error, running);
      }
      const { serverTools } = input;
      const result = yield* serverTools
        ? serverToolLoop({
            servers: this.servers,
            tools: serverTools,
            functions: input.tools,
            stem: serverTools.stem,
            known: turn.held ? await this.storedItems(turn.held.conversation, input, engine) : [],
            input: input.input,
            signal,
            step: (items, tools) => this.modelTurn(turn, items, tools),
          })
        : this.modelTurn(turn, [], input.tools);
      if (!turn.opened) return undefined;
      const { conversation, stored } = turn.opened;
      const done = {
        conversation,
        reply: result,
        stored,
        output: [] as MessageRecord[],
        answer: undefined,
        usage: result?.usage ?? NO_USAGE,
        model: engine.modelName,
      };
      if (result === undefined) return done;

      const stats = {
        finishReason: result.finishReason,
        promptTokens: result.usage.promptTokens,
        completionTokens: result.usage.completionTokens,
        cachedTokens: result.usage.cachedTokens,
        temperature: input.sampling.temperature,
        model: engine.modelName,
      };
      // The reply's message row carries its statistics (its first row when it only called tools).
      const rowsOut = itemRows(input.output(result));
      const carrier = Math.max(
        0,
        rowsOut.findIndex((row) => row.item === undefined && row.role === "assistant"),
      );
      const output = await this.conversations.addMessages(
        conversation,
        rowsOut.map((row, i) => (i === carrier ? { ...row, ...stats } : row)),
      );
      return { ...done, stored: [...stored, ...output], output, answer: output[carrier] };
    } finally {
      // Released however the turn ends, refused or failed: a lease left renewing would hold the conversation.
      await turn.held?.releaseLease?.();
      release();
    }
  }

  /**
   * One model turn of the conversation's turn: its input and `items` so far after the stored history.
   * The first is admitted before anything is stored (a turn over its user's quota keeps nothing,
   * not even an empty conversation), then stores the input and yields `start`.
   */
  private async *modelTurn(
    turn: OpenTurn,
    items: readonly ConversationItem[],
    tools: ToolRequest | undefined,
  ): AsyncGenerator<ConversationTurnStart | TurnEvent, CompletionResult | undefined, void> {
    const { running, input } = turn;
    const { engine } = running;
    let request: ReplyRequest;
    if (turn.opened) {
      // The stored history holds the input now.
      request = await this.request({ ...input, tools, input: [...items] }, engine, turn.opened.conversation);
      await running.admit(request);
    } else {
      const asked = { ...input, tools, input: [...input.input, ...items] };
      request = await this.request(asked, engine, turn.held?.conversation);
      await running.admit(request);
      if (!turn.held) {
        try {
          turn.held = (await this.holdCurrent(input, running.signal, true))!;
        } catch (error) {
          return endedWaiting(error, running);
        }
        // Read again under the lease: another node may have started the same conversation, or
        // taken the lease on the one created here first, and its turns come before this one.
        request = await this.request(asked, engine, turn.held.conversation);
      }
      const { conversation } = turn.held;
      const stored = await this.conversations.addMessages(conversation, itemRows(input.input));
      turn.opened = { conversation, stored };
      yield { type: "start", conversation, stored, model: engine.modelName };
    }
    const reply = yield* running.reply(request);
    return reply && completionOf(reply, engine.modelName);
  }

  /**
   * What a loop of server tools knows of the conversation: its newest items (the servers already
   * listed in it), and the approval requests the input answers, by their ids.
   */
  private async storedItems(conversation: FoundConversation, input: ConversationTurnInput, engine: RunningTurn["engine"]): Promise<ConversationItem[]> {
    const rows = await this.conversations.recentTurns(conversation.id, { maxChars: engine.historyChars });
    const asked = await Promise.all(
      input.input.flatMap((item) => (item.type === "approvalResponse" ? [this.conversations.row(conversation.id, item.approvalRequestId)] : [])),
    );
    return [...rows.flatMap((row) => rowItems({ itemId: "", ...row })), ...asked.flatMap((row) => (row ? rowItems(row) : []))];
  }
}

/**
 * A native turn's reply after its calls: one assistant message of every model turn's words (so
 * its text is its deltas' concatenation, as the native stream promises), the calls before it.
 */
function answerAfterCalls(stem: string, items: readonly ConversationItem[]): ConversationItem[] {
  const thoughts = items.flatMap((item) => (item.type === "thought" ? [item.text] : []));
  const text = items.flatMap((item) => (item.type === "message" ? [item.text] : [])).join("");
  return [
    ...items.filter((item) => item.type !== "message" && item.type !== "thought"),
    ...replyItems(stem, { text, ...(thoughts.length > 0 ? { reasoning: thoughts.join("") } : {}) }),
  ];
}
