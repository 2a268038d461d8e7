/**
 * Kept responses (OpenAI's Responses API): a turn whose input and output are stored as items, and
 * which a later response may continue. A chain's responses share one
 * conversation key, so the engine finds the KV state the previous one left, as for a stored
 * conversation's turns. Knows storage and the completion turn, nothing of HTTP.
 */
import type { ResponseStore } from "../db/storage";
import type { ConversationItem, ResponseEnd, ResponseRecord } from "../db/types";
import { InvalidInput, NotFound, ParleyError } from "../errors";
import { type McpServers, NO_MCP_SERVERS } from "../mcp/servers";
import type { CompletionInput, CompletionResult, CompletionService, CompletionStart } from "./completions";
import { historyOf, type ItemInput, type ItemPage, type ItemPageQuery, type ItemReference, inputItems, newStem, pageOf, replyItems, stemOfItem } from "./items";
import { type LoopResult, type ServerTools, serverToolLoop } from "./server-tools";
import type { ChatService } from "./service";
import { type EngineSource, NO_USAGE, type TurnEvent, type Usage } from "./turn-runner";

export interface ResponseInput extends Omit<CompletionInput, "messages" | "conversationKey" | "startsConversation" | "serverTools"> {
  /** Answer within this stored conversation (its id): the input is added to it, and the reply. */
  conversation?: string;
  /** The system turn; a continued response's own only (OpenAI's rule: instructions are not carried over). */
  instructions?: string;
  /** Items, or references to items of the user's kept responses, resolved in place. */
  input: (ItemInput | ItemReference)[];
  previousResponseId?: string;
  /** Keep it (it can be read, continued, deleted), or only answer. */
  store: boolean;
  /** Generated whatever its client does (the caller's signal then only stops it on purpose); kept. */
  background?: boolean;
  /** What the response repeats of its request, kept with it as given. */
  params: Record<string, unknown>;
  /** Listed MCP servers' tools the service runs itself (server-tools.ts). */
  serverTools?: ServerTools;
}

export interface ResponseStart {
  type: "start";
  model: string;
  /** The response as it starts: `in_progress`, no output yet. */
  response: ResponseRecord;
}

/** The response as it ended, and its reply's token counts (none when it never began). */
export interface ResponseResult {
  response: ResponseRecord;
  usage: Usage;
}

export const newResponseId = () => `resp_${newStem()}`;

/** The stem of a response's items' ids: its id's hex, so a stream names its items as they are kept. */
export const responseStem = (responseId: string) => responseId.slice("resp_".length);

/**
 * How a turn's result ends its response: `cancelled` when its client left (`clientLeft`); cut by
 * the generation cap or a shutdown, `incomplete`.
 */
function endOf(record: ResponseRecord, result: CompletionResult | LoopResult | undefined, clientLeft: boolean): ResponseEnd {
  if (result === undefined) return { status: "cancelled", output: [], usage: null, finishReason: "cancelled", error: null };
  const status = result.finishReason === "stop" ? "completed" : result.finishReason === "cancelled" && clientLeft ? "cancelled" : "incomplete";
  return {
    status,
    output: "items" in result ? result.items : replyItems(responseStem(record.id), result),
    usage: {
      inputTokens: result.usage.promptTokens,
      outputTokens: result.usage.completionTokens,
      cachedTokens: result.usage.cachedTokens,
      reasoningTokens: result.usage.reasoningTokens,
    },
    finishReason: result.finishReason,
    error: null,
  };
}

const failed = (error: unknown): ResponseEnd => ({
  status: "failed",
  output: [],
  usage: null,
  finishReason: null,
  error: error instanceof ParleyError ? error.message : "the response failed on the server",
});

/**
 * How long a running response stays vouched for by its process: renewed at a third of it, so a
 * response whose process died is read as failed within this (`ResponseStore.get`).
 */
const LEASE_MS = 30_000;

export class ResponseService {
  /** The kept responses generating in this process, their leases renewed together while any runs. */
  private readonly held = new Set<string>();
  private renewal: Timer | undefined;

  constructor(
    private readonly completions: CompletionService,
    private readonly chat: ChatService,
    private readonly responses: ResponseStore,
    private readonly engines: EngineSource,
    private readonly servers: McpServers = NO_MCP_SERVERS,
  ) {}

  /**
   * Yields `start` once admitted (a kept response is stored then, `in_progress`), then the reply's
   * pieces; returns the response as it ended, kept so (`cancelled` when its client left, `failed`
   * with the reason when generation failed). Undefined when the client left before it started.
   */
  async *respond(request: ResponseInput): AsyncGenerator<ResponseStart | TurnEvent, ResponseResult | undefined, void> {
    const { instructions, input, previousResponseId, conversation, store, background = false, params, serverTools, ...turn } = request;
    const id = newResponseId();
    if (background && !store) throw new InvalidInput({ part: "detached" }, "a response generated in the background is kept: it cannot also be left unstored");
    if (conversation !== undefined && previousResponseId !== undefined) {
      throw new InvalidInput({ part: "conversation" }, "a response continues a conversation or an earlier response, not both");
    }
    const previous = previousResponseId === undefined ? undefined : await this.previous(request.userId, previousResponseId);
    const items = inputItems(responseStem(id), await this.resolved(request.userId, input));
    const record: ResponseRecord = {
      id,
      userId: request.userId,
      previousResponseId: previous?.id ?? null,
      chainKey: previous?.chainKey ?? id,
      conversationId: null,
      model: "",
      params,
      input: items,
      background,
      createdAt: Date.now(),
      status: "in_progress",
      output: [],
      usage: null,
      finishReason: null,
      error: null,
    };
    const earlier = async (maxChars: number) =>
      previous ? (await this.responses.chain(request.userId, previous.id, { maxChars })).flatMap((link) => [...link.input, ...link.output]) : [];
    const step = (output: readonly ConversationItem[], tools: CompletionInput["tools"], first: boolean) =>
      this.completions.complete({
        ...turn,
        tools,
        conversationKey: record.chainKey,
        // A new chain has nothing cached of its own: the user's best-matching sequence serves it, as a chat completion's.
        startsConversation: previous === undefined && first,
        messages: async (historyChars) => historyOf(instructions, await earlier(historyChars), [...items, ...output]),
      });
    const events =
      conversation !== undefined
        ? this.inConversation({ ...turn, ...(instructions ? { instructions } : {}) }, conversation, record, serverTools)
        : serverTools
          ? serverToolLoop({
              servers: this.servers,
              tools: serverTools,
              functions: turn.tools,
              stem: responseStem(id),
              known: previous ? [...previous.input, ...previous.output] : [],
              input: items,
              ...(turn.signal ? { signal: turn.signal } : {}),
              step,
            })
          : step([], turn.tools, true);
    let kept = false;
    let end: ResponseEnd | undefined;
    try {
      for (;;) {
        const next = await events.next();
        if (next.done) {
          end = endOf(record, next.value, request.signal?.aborted === true);
          return kept || next.value ? { response: { ...record, ...end }, usage: next.value?.usage ?? NO_USAGE } : undefined;
        }
        if (next.value.type !== "start") {
          yield next.value;
          continue;
        }
        record.model = next.value.model;
        const { conversationId } = next.value as { conversationId?: number };
        if (conversationId !== undefined) {
          // Its state is the conversation's, under the key its native turns use.
          record.conversationId = conversationId;
          record.chainKey = String(conversationId);
        }
        if (store) {
          await this.responses.create(record, LEASE_MS);
          kept = true;
          this.hold(id);
        }
        yield { type: "start", model: record.model, response: record };
      }
    } catch (error) {
      end = failed(error);
      throw error;
    } finally {
      // A consumer that stopped early (its client left) leaves the turn cancelled, and kept so.
      await events.return(undefined);
      if (kept) {
        this.release(id);
        await this.responses.finish(id, end ?? endOf(record, undefined, true));
      }
    }
  }

  private hold(id: string): void {
    this.held.add(id);
    // A renewal that fails is retried at the next: a lease outlives two of them.
    this.renewal ??= setInterval(() => void this.responses.renew([...this.held], LEASE_MS).catch(() => undefined), LEASE_MS / 3);
  }

  private release(id: string): void {
    this.held.delete(id);
    if (this.held.size > 0 || !this.renewal) return;
    clearInterval(this.renewal);
    this.renewal = undefined;
  }

  /**
   * The turn within a stored conversation, as a completion: its input and reply are the
   * conversation's items (the reply's named as the response's output; a loop of server tools', all
   * it made), and its start tells the conversation.
   */
  private async *inConversation(
    turn: Omit<CompletionInput, "messages" | "conversationKey" | "startsConversation"> & { instructions?: string },
    conversationId: string,
    record: ResponseRecord,
    serverTools: ServerTools | undefined,
  ): AsyncGenerator<(CompletionStart & { conversationId?: number }) | TurnEvent, CompletionResult | LoopResult | undefined, void> {
    const stem = responseStem(record.id);
    const events = this.chat.converse({
      userId: turn.userId,
      conversationId,
      input: record.input,
      ...(turn.instructions ? { instructions: turn.instructions } : {}),
      create: false,
      output: (reply) => ("items" in reply ? reply.items : replyItems(stem, reply)),
      serverTools: serverTools && { ...serverTools, stem },
      sampling: turn.sampling,
      maxTokens: turn.maxTokens,
      format: turn.format,
      tools: turn.tools,
      ...(turn.signal ? { signal: turn.signal } : {}),
      ...(turn.onQuota ? { onQuota: turn.onQuota } : {}),
      ...(turn.onPicturesLeftOut ? { onPicturesLeftOut: turn.onPicturesLeftOut } : {}),
      ...(turn.model !== undefined ? { model: turn.model } : {}),
    });
    try {
      for (;;) {
        const step = await events.next();
        if (step.done) return step.value?.reply;
        const event = step.value;
        yield event.type === "start" ? { type: "start", model: event.model, conversationId: event.conversation.id } : event;
      }
    } finally {
      await events.return(undefined);
    }
  }

  private async previous(userId: number, id: string): Promise<ResponseRecord> {
    const previous = await this.responses.get(userId, id);
    // Another user's response is not found either: its existence is not revealed.
    if (!previous) throw new NotFound(`no response ${JSON.stringify(id)} to continue`);
    // Its history is its conversation's, which a chain of responses does not follow.
    if (previous.conversationId !== null) {
      throw new InvalidInput({ part: "continues" }, `response ${JSON.stringify(id)} belongs to a conversation: continue the conversation instead`);
    }
    if (previous.status === "queued" || previous.status === "in_progress") {
      throw new InvalidInput({ part: "continues" }, `response ${JSON.stringify(id)} is still ${previous.status}: continue it once it has ended`);
    }
    return previous;
  }

  /** The user's kept response; `NotFound` for another user's or none. */
  async get(userId: number, id: string): Promise<ResponseRecord> {
    const record = await this.responses.get(userId, id);
    if (!record) throw new NotFound(`no response ${JSON.stringify(id)}`);
    return record;
  }

  /**
   * Deletes the user's response, and what the engine keeps of its chain: the cached state holds
   * its text. The chain's other responses stay; their next turn evaluates afresh.
   */
  async delete(userId: number, id: string): Promise<void> {
    const deleted = await this.responses.delete(userId, id);
    if (!deleted) throw new NotFound(`no response ${JSON.stringify(id)}`);
    await this.engines.forget(deleted.chainKey);
  }

  /** A page of the items a response was given. */
  /**
   * The input with each reference replaced by the item it names, in order: an item of one of the
   * user's kept responses. Another user's, or an id of no kept item, is refused naming its place.
   */
  private async resolved(userId: number, input: readonly (ItemInput | ItemReference)[]): Promise<ItemInput[]> {
    const records = new Map<string, ResponseRecord | undefined>();
    const items: ItemInput[] = [];
    for (const [i, entry] of input.entries()) {
      if (entry.type !== "reference") {
        items.push(entry);
        continue;
      }
      const stem = stemOfItem(entry.id);
      const responseId = stem === undefined ? undefined : `resp_${stem}`;
      if (responseId !== undefined && !records.has(responseId)) records.set(responseId, await this.responses.get(userId, responseId));
      const record = responseId === undefined ? undefined : records.get(responseId);
      const item = record && [...record.input, ...record.output].find((kept) => kept.id === entry.id);
      if (!item)
        throw new InvalidInput(
          { part: "history", item: i },
          `no kept item ${JSON.stringify(entry.id)}: a reference names an item of one of your kept responses`,
        );
      items.push(item);
    }
    return items;
  }

  async inputItems(userId: number, id: string, query: ItemPageQuery): Promise<ItemPage> {
    const { input } = await this.get(userId, id);
    return pageOf(query.order === "asc" ? input : input.toReversed(), query, "this response's input");
  }
}
