/**
 * Background responses (`background: true`): generated detached from the request that made them,
 * their stream's events kept as they are framed (in memory here, in storage for every node), so
 * a client may leave and come back: `events` replays them from any point and follows the rest.
 */
import { append } from "../append";
import type { ResponseResult, ResponseStart } from "../chat/responses";
import type { ResponseStore } from "../db/storage";
import { ABANDONED, type ConversationItem, type ResponseEvent, type ResponseRecord } from "../db/types";
import type { Logger } from "../log";
import { toDomainError } from "./errors";
import { spelled } from "./field-names";
import { responseFields } from "./openai/fields";
import { type ServerItemInput, serverItemOf } from "./openai/items";
import { endingEvent, responsesFraming } from "./openai/responses-present";
import type { SseChunk } from "./sse";
import { frame, type TurnEvents } from "./turn-driver";

/** The events after which a response's stream has nothing more. */
const ENDINGS = new Set(["response.completed", "response.incomplete", "response.failed", "error"]);

export interface BackgroundOptions {
  /** How often a running response's new events are written to storage (and a cancel asked on another node looked for). */
  flushMs: number;
  /** How often a follower on another node than the generating one looks for new events. */
  pollMs: number;
}

const typeOf = (text: string) => /^event: (.*)$/m.exec(text)?.[1] ?? "";

/** A response generating on this node: every event so far, and a wake-up for its followers. */
class Running {
  readonly events: ResponseEvent[] = [];
  /** Events kept in storage so far; one write at a time (`flushing`), so none is counted twice or skipped. */
  flushed = 0;
  flushing: Promise<void> = Promise.resolve();
  ended = false;
  private wake = Promise.withResolvers<void>();

  constructor(readonly abort: AbortController) {}

  push(chunks: SseChunk[]): void {
    for (const chunk of chunks) {
      // Elysia's `sse()` gives every event its `toSSE`, which its types do not show.
      const text = (chunk as unknown as { toSSE(): string }).toSSE();
      this.events.push({ seq: this.events.length, type: typeOf(text), text });
    }
    this.wake.resolve();
    this.wake = Promise.withResolvers();
  }

  changed(): Promise<void> {
    return this.wake.promise;
  }
}

/** What an event of the stream says of the output item it is about (OpenAI's shapes: responses-present.ts). */
interface ItemEvent {
  item?: { type: string; id: string; call_id?: string; name?: string; arguments?: string };
  item_id?: string;
  delta?: string;
}

function itemOf({ type, id, call_id = "", name = "" }: NonNullable<ItemEvent["item"]>): ConversationItem {
  if (type === "function_call") return { type: "toolCall", id, callId: call_id, name, arguments: "" };
  return type === "reasoning" ? { type: "thought", id, text: "" } : { type: "message", id, role: "assistant", text: "" };
}

/** The output a response's kept events stream, in order: its thought and text so far, and each call whose arguments closed. */
function outputOf(events: readonly ResponseEvent[]): ConversationItem[] {
  const items = new Map<string, ConversationItem>();
  const closedCalls = new Set<string>();
  for (const { type, text } of events) {
    const { item, item_id = "", delta = "" } = JSON.parse(/^data: (.*)$/m.exec(text)?.[1] ?? "{}") as ItemEvent;
    const open = items.get(item_id);
    // A server's item is kept once done: what it is added with is only its start.
    if (item?.type.startsWith("mcp_")) {
      if (type === "response.output_item.done") items.set(item.id, serverItemOf(item as unknown as ServerItemInput) as ConversationItem);
    } else if (type === "response.output_item.added" && item) items.set(item.id, itemOf(item));
    else if ((type === "response.output_text.delta" || type === "response.reasoning_text.delta") && (open?.type === "message" || open?.type === "thought"))
      open.text += delta;
    else if (type === "response.output_item.done" && item?.type === "function_call") {
      const call = items.get(item.id);
      if (call?.type === "toolCall") call.arguments = item.arguments ?? "";
      closedCalls.add(item.id);
    }
  }
  return [...items.values()].filter((item) => item.type !== "toolCall" || closedCalls.has(item.id));
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
/** How long a follower on another node waits, once the response has ended, for its last events to be written. */
const LAST_EVENTS_MS = 5_000;

export class BackgroundResponses {
  private readonly running = new Map<string, Running>();
  private readonly drives = new Set<Promise<void>>();

  constructor(
    private readonly store: ResponseStore,
    private readonly log: Logger,
    private readonly options: BackgroundOptions,
  ) {}

  /**
   * Starts the turn with a signal of its own (only a cancel stops it), and resolves with the
   * response once it has started; a refusal before that throws, as a foreground request's does.
   */
  async start(turn: (signal: AbortSignal) => TurnEvents<ResponseStart, ResponseResult>): Promise<ResponseRecord> {
    const abort = new AbortController();
    const events = turn(abort.signal);
    const first = await events.next();
    if (first.done || first.value.type !== "start") throw new Error("a background response ended before it started");
    const framing = responsesFraming();
    const running = new Running(abort);
    const { response } = first.value;
    this.running.set(response.id, running);
    running.push(framing.start(first.value));
    const drive = this.drive(response.id, running, events, framing);
    this.drives.add(drive);
    void drive.finally(() => this.drives.delete(drive));
    return response;
  }

  private async drive(
    id: string,
    running: Running,
    events: TurnEvents<ResponseStart, ResponseResult>,
    framing: ReturnType<typeof responsesFraming>,
  ): Promise<void> {
    const flusher = setInterval(() => void this.flush(id, running), this.options.flushMs);
    try {
      for (;;) {
        const step = await events.next();
        if (step.done) {
          if (step.value) running.push(framing.done(step.value));
          break;
        }
        if (step.value.type !== "start") running.push(frame(framing, step.value));
      }
    } catch (error) {
      const failure = spelled(toDomainError(undefined, error), responseFields);
      if (failure.kind === "internal") this.log.error({ response_id: id, err: error }, "background response failed");
      running.push(framing.error(failure, id));
    } finally {
      clearInterval(flusher);
      running.ended = true;
      await this.flush(id, running);
      this.running.delete(id);
      running.push([]);
    }
  }

  /** Writes the events not yet kept, after any write still going; on another node's cancel, stops the response. */
  private flush(id: string, running: Running): Promise<void> {
    running.flushing = running.flushing.then(() => this.write(id, running));
    return running.flushing;
  }

  private async write(id: string, running: Running): Promise<void> {
    try {
      const pending = running.events.slice(running.flushed);
      await this.store.appendEvents(id, pending);
      running.flushed += pending.length;
      if (!running.ended && (await this.store.cancelRequested(id))) running.abort.abort();
    } catch (error) {
      // The next flush writes them: an event is kept once by its number, whichever flush gets there.
      this.log.warn({ response_id: id, err: String(error) }, "background response events not yet kept");
    }
  }

  /**
   * Stops the user's background response wherever it runs (the node running it is asked through
   * storage), and returns it once it has ended, or as it stands after `waitMs`.
   */
  async cancel(userId: number, id: string, waitMs: number): Promise<ResponseRecord | undefined> {
    const local = this.running.get(id);
    if (local) local.abort.abort();
    else await this.store.requestCancel(userId, id);
    const deadline = performance.now() + waitMs;
    for (;;) {
      const record = await this.store.get(userId, id);
      if (!record || (record.status !== "queued" && record.status !== "in_progress") || performance.now() > deadline) return record;
      await sleep(this.options.pollMs);
    }
  }

  /**
   * The response's events after `after` (its `sequence_number`), then the rest as they come,
   * until its last. Here from memory while it runs here, else from storage.
   */
  async *events(userId: number, id: string, after: number, signal: AbortSignal): AsyncGenerator<SseChunk, void, void> {
    let next = after + 1;
    let endedAt: number | undefined;
    while (!signal.aborted) {
      const local = this.running.get(id);
      const batch = local ? local.events.slice(next) : await this.store.events(id, next - 1, 256);
      for (const event of batch) yield { toSSE: () => event.text };
      next += batch.length;
      if (batch.some((event) => ENDINGS.has(event.type))) return;
      if (batch.length > 0) continue;
      if (local) {
        await local.changed();
        continue;
      }
      // Ended on another node, whose last events come within moments; or its node died, and they never come.
      const record = await this.store.get(userId, id);
      if (!record) return;
      if (record.status !== "queued" && record.status !== "in_progress") {
        endedAt ??= performance.now();
        if (record.error === ABANDONED || performance.now() - endedAt > LAST_EVENTS_MS) {
          yield endingEvent(await this.asStands(record), next);
          return;
        }
      }
      await sleep(this.options.pollMs);
    }
  }

  /**
   * The response as it stands. One whose server died while generating it was kept with no output
   * (its end was never written), but with its stream's events so far: its output is what they
   * streamed, so reading it and replaying its stream tell the same.
   */
  async asStands(record: ResponseRecord): Promise<ResponseRecord> {
    if (!record.background || record.error !== ABANDONED || record.output.length > 0) return record;
    const events: ResponseEvent[] = [];
    for (let batch = await this.store.events(record.id, -1, 256); batch.length > 0; batch = await this.store.events(record.id, batch.at(-1)!.seq, 256))
      append(events, batch);
    return { ...record, output: outputOf(events) };
  }

  /** Resolves once every background response has ended and its events are kept. */
  async settled(): Promise<void> {
    while (this.drives.size > 0) await Promise.all([...this.drives]);
  }
}
