import type { ConversationItem } from "../db/types";
import type { FinishReason, GenerateResult, Infill, ReplyFormat, SamplingRequest, StopWhen, TokenLogprob, ToolCall, ToolRequest, Turn } from "../llm/engine";
import { type McpServers, NO_MCP_SERVERS } from "../mcp/servers";
import { historyOf } from "./items";
import { type LoopResult, type ServerTools, serverToolLoop } from "./server-tools";
import { type ModelInfo, type TurnEvent, type TurnHooks, type TurnRunner, type Usage, usageOf } from "./turn-runner";

export interface CompletionInput extends TurnHooks {
  /** Whose request: only this user's earlier requests' KV state is reused. */
  userId: number;
  /**
   * The whole conversation, as the client keeps it; or read once the turn is admitted, given how
   * many characters of history a prompt can reach (`Engine.historyChars`).
   */
  messages: Turn[] | ((historyChars: number) => Promise<Turn[]>);
  /** Instead of messages (then empty), a prompt as its client wrote it: no chat template (`GenerateRequest.raw`). */
  raw?: string;
  /** Instead of messages (then empty), what a completion fills in between (`GenerateRequest.infill`). */
  infill?: Infill;
  /** A kept conversation's own key, whose cached state the engine looks for first (`GenerateRequest`). */
  conversationKey?: string;
  /** The kept conversation starts with this turn: its sequence is chosen by its prompt (`GenerateRequest.startsConversation`). */
  startsConversation?: boolean;
  sampling: SamplingRequest;
  format?: ReplyFormat;
  /** Tools the reply may call. */
  tools?: ToolRequest;
  /** Each answer token's log-probability and this many most likely tokens' (0 to 20). */
  logprobs?: number;
  /** Absent: as long as the context allows. */
  maxTokens?: number;
  /** The request's own context, when smaller than the model's (`GenerateRequest.contextTokens`). */
  contextTokens?: number;
  stop?: readonly string[];
  /** Conditions on the answer's lines that end it early (`GenerateRequest.stopWhen`). */
  stopWhen?: StopWhen;
  /** A reasoning model's thought at most this many tokens (`GenerateRequest.thoughtTokens`). */
  thoughtTokens?: number;
  /** Listed MCP servers' tools the service runs itself, its items named by `stem` (server-tools.ts). */
  serverTools?: ServerTools & { stem: string };
}

export interface CompletionStart {
  type: "start";
  model: string;
  /** The context the prompt is fitted to: the request's own, at most the model's (told by stateless completions). */
  contextTokens?: number;
  /** How long the turn waited for its model: its load, where it was not loaded (told by stateless completions). */
  loadMs?: number;
}

export interface CompletionResult {
  text: string;
  /** The request's stop string that ended the reply, when one did. */
  stopSequence?: string;
  /** A reasoning model's thought; absent for other models. */
  reasoning?: string;
  finishReason: FinishReason;
  /** The tools the reply called, after its text; absent when it called none. */
  toolCalls?: ToolCall[];
  /** Asked for: the answer's tokens' log-probabilities. */
  logprobs?: TokenLogprob[];
  usage: Usage;
  model: string;
}

/** A reply as a completion's result. */
export const completionOf = (result: GenerateResult, model: string): CompletionResult => ({
  text: result.text,
  ...(result.reasoning !== undefined ? { reasoning: result.reasoning } : {}),
  finishReason: result.finishReason,
  ...(result.stopSequence !== undefined ? { stopSequence: result.stopSequence } : {}),
  ...(result.toolCalls ? { toolCalls: result.toolCalls } : {}),
  ...(result.logprobs ? { logprobs: result.logprobs } : {}),
  usage: usageOf(result),
  model,
});

/**
 * A stateless completion: the client sends the history, nothing is stored. Admission, the
 * generation cap, cancellation and shutdown are the turn runner's, as for stored conversations;
 * the engine reuses whatever prefix of the prompt a sequence still holds from the same user.
 */
export class CompletionService {
  constructor(
    private readonly runner: TurnRunner,
    private readonly servers: McpServers = NO_MCP_SERVERS,
  ) {}

  /**
   * The tokens the prompt of `messages` takes on the model named (as a fresh sequence would
   * evaluate it, the chat template applied), without generating.
   */
  async countTokens(input: Pick<CompletionInput, "userId" | "model" | "tools" | "signal"> & { messages: Turn[] }): Promise<number> {
    const held = await this.runner.engines.hold(input.model, input.signal);
    try {
      const measured = await held.engine.measure({ history: input.messages, cacheScope: String(input.userId), maxTokens: 1, tools: input.tools });
      measured.release();
      return measured.tokens;
    } finally {
      held.release();
    }
  }

  /**
   * Loads the model named (the default when none) and lets it go, so that it stays loaded for its
   * keep-alive (`keepAliveMs`: 0 unloads it once no one holds it). Its id.
   */
  async load(input: Pick<CompletionInput, "model" | "keepAliveMs" | "signal">): Promise<string> {
    const held = await this.runner.engines.hold(input.model, input.signal, input.keepAliveMs);
    held.release();
    return held.engine.modelName;
  }

  /** Every model the service has, the default first. */
  models(): ModelInfo[] {
    return this.runner.engines.list();
  }

  /**
   * Yields `start` once admitted, then `reasoning` pieces, `delta`s, tool calls and log-probabilities;
   * undefined when the client left before generation began. With `serverTools`, the loop of model
   * turns and calls, each turn's history the messages and the calls so far.
   */
  complete(input: CompletionInput): AsyncGenerator<CompletionStart | TurnEvent, CompletionResult | LoopResult | undefined, void> {
    const { serverTools, ...turn } = input;
    if (!serverTools) return this.completeOne(turn);
    const { messages } = turn;
    return serverToolLoop({
      servers: this.servers,
      tools: serverTools,
      functions: turn.tools,
      stem: serverTools.stem,
      known: [],
      input: [],
      ...(turn.signal ? { signal: turn.signal } : {}),
      step: (items: readonly ConversationItem[], tools, first) =>
        this.completeOne({
          ...turn,
          tools,
          startsConversation: turn.startsConversation === true && first,
          messages: async (historyChars) => [...(typeof messages === "function" ? await messages(historyChars) : messages), ...historyOf(undefined, [], items)],
        }),
    });
  }

  private async *completeOne(input: CompletionInput): AsyncGenerator<CompletionStart | TurnEvent, CompletionResult | undefined, void> {
    const asked = performance.now();
    const running = await this.runner.begin(input.userId, input);
    const loadMs = performance.now() - asked;
    try {
      const { engine } = running;
      const maxTokens = input.maxTokens ?? engine.contextSize;
      const cacheScope = String(input.userId);
      const history = typeof input.messages === "function" ? await input.messages(engine.historyChars) : input.messages;
      await engine.check({
        ...input.sampling,
        format: input.format,
        tools: input.tools,
        logprobs: input.logprobs,
        thoughtTokens: input.thoughtTokens,
        maxTokens,
        contextTokens: input.contextTokens,
        cacheScope,
        infill: input.infill,
        images: history.flatMap((turn) => turn.images ?? []),
      });
      const request = {
        ...(input.conversationKey !== undefined ? { conversationKey: input.conversationKey, startsConversation: input.startsConversation === true } : {}),
        cacheScope,
        history,
        ...(input.raw !== undefined ? { raw: input.raw } : {}),
        ...(input.infill ? { infill: input.infill } : {}),
        ...input.sampling,
        format: input.format,
        tools: input.tools,
        logprobs: input.logprobs,
        maxTokens,
        contextTokens: input.contextTokens,
        stop: input.stop,
        ...(input.stopWhen ? { stopWhen: input.stopWhen } : {}),
        thoughtTokens: input.thoughtTokens,
      };
      await running.admit(request);
      yield { type: "start", model: engine.modelName, contextTokens: Math.min(input.contextTokens ?? engine.contextSize, engine.contextSize), loadMs };
      const result = yield* running.reply(request);
      return result && completionOf(result, engine.modelName);
    } finally {
      running.end();
    }
  }
}
