import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, postChat, readSse, type Served, type SseEvent, serveApp, testDb, testEngine, until } from "../support";

allowSlowTests();

// bench-small never ends a reply by itself: its streams run until their max_tokens or a cancel.
// A small batch makes a long prompt many steps, each of which the running streams share.
const BATCH = 128;
const db = testDb("batching");
const { key } = await db.keys.create("alice", "user");
let engine: Engine;
let server: Served;

beforeAll(async () => {
  engine = await testEngine({ preset: "bench-small", parallel: 4, contextSize: 4096, batchSize: BATCH });
  server = serveApp({ storage: db.storage, engine });
});
afterAll(async () => {
  await server.stop();
  await engine.close();
  await db.storage.close();
});

const replyOf = (conversation: string) =>
  db.storage.sqlite
    .query(
      "SELECT m.content, m.finish_reason FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE c.external_id = ? AND m.role = 'assistant'",
    )
    .get(conversation) as { content: string; finish_reason: string } | null;

interface Stream {
  /** Deltas with the time each arrived. */
  deltas: { at: number; content: string }[];
  /** Settles with the last event once the stream ends. */
  ended: Promise<SseEvent | undefined>;
}

async function openStream(conversation: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<Stream> {
  const response = await postChat(
    server.url,
    key,
    { message: "Tell me everything", conversation_id: conversation, stream: true, temperature: 0, ...body },
    signal,
  );
  expect(response.status).toBe(200);
  const deltas: Stream["deltas"] = [];
  const ended = (async () => {
    let last: SseEvent | undefined;
    try {
      for await (const event of readSse(response)) {
        last = event;
        if (event.event === "delta") deltas.push({ at: performance.now(), content: (event.data as { content: string }).content });
      }
    } catch (error) {
      if (!signal?.aborted) throw error;
    }
    return last;
  })();
  return { deltas, ended };
}

describe("streams decoded together", () => {
  test("cancelling one of four mid-reply: the other three complete and are stored, the partial is stored as cancelled, every sequence is free", async () => {
    const leaving = new AbortController();
    const streams = await Promise.all(
      ["stay-1", "stay-2", "stay-3", "leave"].map((id) =>
        openStream(id, { max_tokens: id === "leave" ? 4096 : 40 }, id === "leave" ? leaving.signal : undefined),
      ),
    );
    await until(() => streams.every((stream) => stream.deltas.length >= 3), "every stream to be mid-reply");
    leaving.abort();
    for (const stream of streams.slice(0, 3)) expect((await stream.ended)?.event).toBe("done");
    await until(() => replyOf("leave") !== null, "the cancelled reply to be stored");
    for (const id of ["stay-1", "stay-2", "stay-3"]) expect(replyOf(id)?.finish_reason).toBe("length");
    const cancelled = replyOf("leave")!;
    expect(cancelled.finish_reason).toBe("cancelled");
    expect(cancelled.content.startsWith(streams[3]!.deltas.map((d) => d.content).join(""))).toBe(true);
    await until(() => engine.stats().busy === 0, "every sequence to be free");
  });

  test("a long prompt admitted while three streams run: they keep receiving deltas while it is evaluated", async () => {
    const stop = new AbortController();
    const running = await Promise.all(["run-1", "run-2", "run-3"].map((id) => openStream(id, { max_tokens: 4096 }, stop.signal)));
    await until(() => running.every((stream) => stream.deltas.length >= 1), "the three streams to be decoding");

    const words = Array.from({ length: 560 }, (_, i) => `w${i}`).join(" ");
    const sentAt = performance.now();
    const long = await openStream("long", { message: words, max_tokens: 1 });
    const done = await long.ended;
    const firstTokenAt = long.deltas[0]?.at ?? performance.now();
    const usage = (done!.data as { usage: { prompt_tokens: number } }).usage;
    expect(usage.prompt_tokens).toBeGreaterThanOrEqual(2000);

    // Evaluated in prompt_tokens / BATCH steps: had it taken the context to itself, the streams
    // would have received nothing until its first token.
    const steps = Math.floor(usage.prompt_tokens / BATCH);
    for (const stream of running) {
      const during = stream.deltas.filter((delta) => delta.at > sentAt && delta.at < firstTokenAt).length;
      expect(during).toBeGreaterThanOrEqual(steps / 2);
    }
    stop.abort();
    await until(() => engine.stats().busy === 0, "every sequence to be free");
  });
});
