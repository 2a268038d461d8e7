import { sse } from "elysia";

/** A comment line: keeps proxies and clients from timing out an idle stream. */
export const PING = { toSSE: () => ": ping\n\n" } as const;
export type Ping = typeof PING;

/** Data is always an object: `sse()` would write a string with a newline as a broken event. */
export const event = (name: string, data: object) => sse({ event: name, data });

/** An unnamed event, as OpenAI's streams write them: `data:` and one line of JSON, or `[DONE]`. */
export const data = (payload: object | "[DONE]") => {
  const line = `data: ${typeof payload === "string" ? payload : JSON.stringify(payload)}\n\n`;
  return { toSSE: () => line };
};

/** One JSON object and a newline: a stream of newline-delimited JSON, as Ollama's API writes one. */
export const jsonLine = (payload: object) => {
  const line = `${JSON.stringify(payload)}\n`;
  return { toSSE: () => line };
};

/** What a stream writes: a named or unnamed event, a heartbeat comment, or a line of JSON. */
export type SseChunk = ReturnType<typeof event> | ReturnType<typeof data> | Ping | ReturnType<typeof jsonLine>;

type Step<T, R> = { kind: "item"; result: IteratorResult<T, R> } | { kind: "failed"; error: unknown } | { kind: "tick" } | { kind: "aborted" };

/**
 * Interleaves `PING` into `source` whenever it is silent for `intervalMs`, and stops at once
 * when `signal` aborts, even while `source` is blocked. A source left unfinished (abort, or the
 * consumer stopped early) is drained in the background: its own abort handling ends it soon,
 * and it must reach its end to store what it has and release what it holds.
 *
 * One timer serves the whole stream, re-armed for the rest of the interval when it finds the
 * source was not silent: an item (a reply's token) costs no timer of its own.
 */
export async function* withHeartbeat<T, R>(source: AsyncIterator<T, R>, intervalMs: number, signal: AbortSignal): AsyncGenerator<T | Ping, R | undefined> {
  const aborted = new Promise<Step<T, R>>((resolve) => {
    if (signal.aborted) resolve({ kind: "aborted" });
    else signal.addEventListener("abort", () => resolve({ kind: "aborted" }), { once: true });
  });
  const pull = () =>
    source.next().then(
      (result): Step<T, R> => ({ kind: "item", result }),
      (error: unknown): Step<T, R> => ({ kind: "failed", error }),
    );
  let lastSaid = performance.now();
  let tick = Promise.withResolvers<Step<T, R>>();
  const fire = () => {
    const silent = performance.now() - lastSaid;
    if (silent >= intervalMs) tick.resolve({ kind: "tick" });
    else timer = setTimeout(fire, intervalMs - silent);
  };
  let timer = setTimeout(fire, intervalMs);
  let pending = pull();
  let finished = false;
  try {
    for (;;) {
      const step = await Promise.race([pending, tick.promise, aborted]);
      const now = performance.now();
      const silent = now - lastSaid;
      lastSaid = now;
      if (step.kind === "aborted") return undefined;
      if (step.kind === "tick") {
        tick = Promise.withResolvers();
        timer = setTimeout(fire, intervalMs);
        // The timer fired while the consumer held the last item: that item broke the silence.
        if (silent >= intervalMs) yield PING;
        continue;
      }
      if (step.kind === "failed") {
        finished = true;
        throw step.error;
      }
      if (step.result.done) {
        finished = true;
        return step.result.value;
      }
      yield step.result.value;
      pending = pull();
    }
  } finally {
    clearTimeout(timer);
    if (!finished) void drain(source, pending);
  }
}

async function drain<T, R>(source: AsyncIterator<T, R>, pending: Promise<Step<T, R>>): Promise<void> {
  let step = await pending;
  try {
    while (step.kind === "item" && !step.result.done) step = { kind: "item", result: await source.next() };
  } catch (error) {
    step = { kind: "failed", error };
  }
  if (step.kind === "failed") {
    console.error(JSON.stringify({ level: "error", msg: "abandoned stream failed", err: String(step.error) }));
  }
}
