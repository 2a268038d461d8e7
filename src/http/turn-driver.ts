import type { Server } from "elysia/universal";
import type { CompletionResult, CompletionService, CompletionStart } from "../chat/completions";
import type { Usage } from "../chat/service";
import type { TurnEvent, TurnHooks, TurnPrompt, TurnServerTool } from "../chat/turn-runner";
import type { DomainError } from "../errors";
import type { TokenLogprob, ToolCallPart } from "../llm/engine";
import type { Logger } from "../log";
import type { Metrics } from "../metrics";
import { refusalOf, toDomainError } from "./errors";
import { spelled } from "./field-names";
import type { BodyLimits } from "./json-body";
import { type RateLimiter, tokenQuotaHeaders } from "./rate-limit";
import { contextOf } from "./request-context";
import { PING, type SseChunk, withHeartbeat } from "./sse";

/**
 * A piece of the reply: its answer (`delta`), a reasoning model's thought before it (`reasoning`),
 * a call of a tool after it, the log-probabilities of answer tokens given.
 */
type ReplyEvent = TurnEvent;

/** A turn as the chat layer runs it: one `start` once it is admitted, its reply's pieces, its result. */
export type TurnEvents<Start, Result> = AsyncGenerator<Start | ReplyEvent, Result | undefined, void>;

/** What a turn's request gives it: `signal` aborts when the client goes away; `onQuota` shows the user's budget. */
export type RequestHooks = Required<Pick<TurnHooks, "signal" | "onQuota" | "onPicturesLeftOut">>;

/** Starts the turn with its request's hooks. */
export type StartTurn<Start, Result> = (hooks: RequestHooks) => TurnEvents<Start, Result>;

/** How one protocol writes a turn's events on a stream. */
export interface Framing<Start, Result> {
  /** The stream's media type when it is not server-sent events; such a stream has no comment line to keep it alive. */
  readonly contentType?: string;
  start(start: Start): SseChunk[];
  delta(content: string): SseChunk[];
  reasoning(content: string): SseChunk[];
  /** For a protocol whose replies call tools: each part of a call as it comes. */
  toolCall?(part: ToolCallPart): SseChunk[];
  /** For a protocol whose turns run tools on their servers: each step, call and server item as it comes. */
  serverTool?(event: TurnServerTool): SseChunk[];
  /** For a protocol whose replies tell their tokens' log-probabilities. */
  logprobs?(entries: TokenLogprob[]): SseChunk[];
  /** The prompt, once evaluated, for a protocol that shows its size before the reply. */
  prompt?(prompt: TurnPrompt): SseChunk[];
  /** What keeps a silent stream alive, for a protocol that has its own event for it (when it may be sent yet); a comment line otherwise. */
  ping?(): SseChunk | undefined;
  done(result: Result): SseChunk[];
  error(error: DomainError, requestId: string): SseChunk[];
}

/** What a plain response's turn needs from its request. */
export interface PlainExchange {
  request: Request;
  set: { headers: Record<string, unknown> };
}

/** What the driver needs from a request. */
export interface Exchange extends PlainExchange {
  server: Server | null;
  keyId: number;
}

/**
 * The request's hooks: the user's budget goes on its headers, the last word before they are sent
 * winning. `signal`: a turn that outlives its request (a background response) has its own.
 */
export const hooksOf = ({ request, set }: PlainExchange, signal = request.signal): RequestHooks => ({
  signal,
  onQuota: (state) => {
    contextOf(request).quota = "served";
    Object.assign(set.headers, tokenQuotaHeaders(state));
  },
  onPicturesLeftOut: (count) => {
    contextOf(request).picturesLeftOut = count;
    set.headers["x-parley-pictures-left-out"] = String(count);
  },
});

/** What a route of stateless completion turns needs, whatever its protocol. */
export interface CompletionRouteDeps {
  completions: CompletionService;
  turns: TurnDriver;
  body: BodyLimits;
}

export interface TurnDriverDeps {
  limiter: RateLimiter;
  metrics: Metrics;
  log: Logger;
  heartbeatMs: number;
}

/**
 * Runs a turn for an HTTP request, whatever protocol frames it: cancellation when the client goes
 * away, metering (time to first token, tokens, decode speed, the log line's token count), and for
 * streams the per-key stream slot, heartbeats, Bun's idle timeout and the error that arrives after
 * the first byte. Routes only choose plain or streamed and frame the events.
 */
export class TurnDriver {
  constructor(private readonly deps: TurnDriverDeps) {}

  /** Runs the turn to its end for a plain response; undefined when the client left first. */
  async complete<Start, Result extends { usage: Usage }>(exchange: PlainExchange, start: StartTurn<Start, Result>): Promise<Result | undefined> {
    const meter = this.meter(exchange.request);
    const turn = start(hooksOf(exchange));
    for (;;) {
      const step = await turn.next();
      if (step.done) {
        if (step.value) meter.done(step.value.usage);
        return step.value;
      }
      if (isToken(step.value)) meter.token();
    }
  }

  /**
   * The turn as a stream of framed events. Everything up to the turn's `start` happens before the
   * first byte, so a refusal (overloaded, stream cap) is still an ordinary JSON error.
   */
  async *stream<Start, Result extends { usage: Usage }>(
    exchange: Exchange,
    start: StartTurn<Start, Result>,
    framing: Framing<Start, Result>,
  ): AsyncGenerator<SseChunk, void, void> {
    const { request, set, server } = exchange;
    const closeSlot = await this.deps.limiter.openStream(exchange.keyId);
    try {
      const meter = this.meter(request);
      // Bun's idle timeout must not cut a long wait: for the conversation's previous turn (here or on
      // another node) before the first byte, for a sequence after it (then heartbeats run).
      server?.timeout(request, 0);
      const turn = start(hooksOf(exchange));
      const first = await turn.next();
      if (first.done || isReply(first.value)) return;
      set.headers["content-type"] = framing.contentType ?? "text/event-stream";
      set.headers["cache-control"] = "no-cache";
      yield* framing.start(first.value);
      try {
        const events = withHeartbeat(turn, this.deps.heartbeatMs, request.signal);
        for (;;) {
          const step = await events.next();
          if (step.done) {
            if (step.value) {
              meter.done(step.value.usage);
              yield* framing.done(step.value);
            }
            return;
          }
          if (step.value === PING) {
            const ping = framing.ping?.() ?? (framing.contentType === undefined ? PING : undefined);
            if (ping) yield ping;
          } else if (isReply(step.value)) {
            if (isToken(step.value)) meter.token();
            yield* frame(framing, step.value);
          }
        }
      } catch (error) {
        // Past the first byte Elysia would only log a throw; the client gets an error event.
        const context = contextOf(request);
        const failure = spelled(toDomainError(undefined, error), context.fields);
        const { id } = context;
        if (failure.kind === "quota_exceeded") context.quota = "quota_exceeded";
        context.refusal = refusalOf(failure);
        if (failure.kind === "internal") this.deps.log.error({ request_id: id, err: error }, "stream failed");
        yield* framing.error(failure, id);
      }
    } finally {
      closeSlot();
    }
  }

  /**
   * A stream of events framed before, elsewhere (a background response's, replayed): the key's
   * stream slot, Bun's idle timeout lifted, heartbeats while it is silent.
   */
  async *replay(exchange: Exchange, events: (signal: AbortSignal) => AsyncGenerator<SseChunk, void, void>): AsyncGenerator<SseChunk, void, void> {
    const { request, set, server } = exchange;
    const closeSlot = await this.deps.limiter.openStream(exchange.keyId);
    try {
      server?.timeout(request, 0);
      set.headers["content-type"] = "text/event-stream";
      set.headers["cache-control"] = "no-cache";
      yield* withHeartbeat(events(request.signal), this.deps.heartbeatMs, request.signal);
    } finally {
      closeSlot();
    }
  }

  /** Times one reply's tokens for the metrics and the request's log line. */
  private meter(request: Request) {
    const { metrics } = this.deps;
    const context = contextOf(request);
    let firstTokenAt: number | undefined;
    return {
      token() {
        if (firstTokenAt !== undefined) return;
        firstTokenAt = performance.now();
        metrics.timeToFirstToken.observe((firstTokenAt - context.startedAt) / 1000);
      },
      done({ completionTokens, promptTokens, cachedTokens }: Usage) {
        context.tokens = completionTokens;
        metrics.tokensGenerated.inc(completionTokens);
        metrics.promptTokens.inc({ source: "cached" }, cachedTokens);
        metrics.promptTokens.inc({ source: "evaluated" }, promptTokens - cachedTokens);
        const seconds = firstTokenAt === undefined ? 0 : (performance.now() - firstTokenAt) / 1000;
        if (completionTokens > 1 && seconds > 0) metrics.tokensPerSecond.observe((completionTokens - 1) / seconds);
      },
    };
  }
}

const isReply = (event: unknown): event is ReplyEvent => {
  const { type } = event as { type?: unknown };
  return type === "delta" || type === "reasoning" || type === "toolCall" || type === "logprobs" || type === "prompt" || type === "serverTool";
};

/** A piece of the reply's own text or calls: what the meter counts as a token arriving. */
const isToken = (event: unknown): boolean => isReply(event) && event.type !== "logprobs" && event.type !== "prompt" && event.type !== "serverTool";

export function frame<Start, Result>(framing: Framing<Start, Result>, event: ReplyEvent): SseChunk[] {
  switch (event.type) {
    case "delta":
      return framing.delta(event.content);
    case "reasoning":
      return framing.reasoning(event.content);
    case "toolCall":
      if (!framing.toolCall) throw new Error("a reply called a tool on a protocol without tools");
      return framing.toolCall(event.part);
    case "logprobs":
      if (!framing.logprobs) throw new Error("a reply told log-probabilities on a protocol without them");
      return framing.logprobs(event.entries);
    case "prompt":
      return framing.prompt?.(event) ?? [];
    case "serverTool":
      if (!framing.serverTool) throw new Error("a turn ran a server's tools on a protocol without them");
      return framing.serverTool(event);
  }
}

/**
 * The turn's events as they come, each seen by `seen` first (a route that measures its times from
 * them); its end handed back (a consumer that stops early ends the turn too).
 */
export async function* watched(
  events: AsyncGenerator<CompletionStart | TurnEvent, CompletionResult | undefined, void>,
  seen: (event: CompletionStart | TurnEvent) => void,
): AsyncGenerator<CompletionStart | TurnEvent, CompletionResult | undefined, void> {
  try {
    for (;;) {
      const step = await events.next();
      if (step.done) return step.value;
      seen(step.value);
      yield step.value;
    }
  } finally {
    await events.return(undefined);
  }
}
