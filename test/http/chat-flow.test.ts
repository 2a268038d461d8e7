import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, postChat, readSse, type Served, type SseEvent, serveApp, testDb, testEngine, until } from "../support";

allowSlowTests();

// The bench-small model (random weights, ~100 M parameters) never ends a reply by itself and
// takes tens of ms per token: long enough to disconnect mid-reply and to fill the queue.
const db = testDb("chat-flow");
const { key, userId } = await db.keys.create("alice", "user");
let engine: Engine;
let server: Served;

beforeAll(async () => {
  engine = await testEngine({ preset: "bench-small", parallel: 1, queueMax: 1, contextSize: 512 });
  server = serveApp({ storage: db.storage, engine, limits: { heartbeatMs: 100 } });
});
afterAll(async () => {
  await server.stop();
  await engine.close();
  await db.storage.close();
});

const post = (body: Record<string, unknown>, signal?: AbortSignal) => postChat(server.url, key, { max_tokens: 4096, temperature: 1, ...body }, signal);

const rows = (conversation: string) =>
  db.storage.sqlite
    .query("SELECT m.role, m.content, m.finish_reason FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE c.external_id = ? ORDER BY m.id")
    .all(conversation) as { role: string; content: string; finish_reason: string | null }[];

/**
 * Opens a stream and resolves once `ready` holds for the events seen so far. Reading goes on in
 * the background (stopping would cancel the body, which is a disconnect) until `controller` aborts.
 */
async function openStream(body: Record<string, unknown>, controller: AbortController, ready: (seen: SseEvent[]) => boolean) {
  const response = await post({ ...body, stream: true }, controller.signal);
  expect(response.status).toBe(200);
  const seen: SseEvent[] = [];
  const { promise, resolve, reject } = Promise.withResolvers<SseEvent[]>();
  void (async () => {
    try {
      for await (const event of readSse(response)) {
        seen.push(event);
        if (ready(seen)) resolve([...seen]);
      }
      reject(new Error(`stream ended before it was ready: ${JSON.stringify(seen.map((e) => e.event))}`));
    } catch (error) {
      reject(error);
    }
  })();
  return promise;
}

describe("streams that end early, and a full queue", () => {
  test("a client that disconnects mid-reply stops generation; the partial reply is stored as cancelled", async () => {
    const controller = new AbortController();
    const seen = await openStream(
      { message: "Write forever", conversation_id: "dropped" },
      controller,
      (events) => events.filter((event) => event.event === "delta").length >= 3,
    );
    controller.abort();
    await until(() => rows("dropped").length === 2, "the cancelled reply to be stored");
    const [user, reply] = rows("dropped");
    expect(user).toMatchObject({ role: "user", content: "Write forever" });
    expect(reply!.finish_reason).toBe("cancelled");
    const received = seen
      .filter((e) => e.event === "delta")
      .map((e) => (e.data as { content: string }).content)
      .join("");
    expect(reply!.content.startsWith(received)).toBe(true);
    // Stopped within a few tokens of the disconnect, far short of max_tokens.
    expect(reply!.content.length).toBeLessThan(received.length + 400);
    await until(() => engine.stats().busy === 0, "the sequence to be free");
  });

  test("while one reply runs: a second waits with heartbeats, a third is refused with 503", async () => {
    const running = new AbortController();
    await openStream({ message: "Occupy the only sequence", conversation_id: "busy" }, running, (events) => events.some((event) => event.event === "delta"));

    const waiting = new AbortController();
    const waited = openStream(
      { message: "I will wait", conversation_id: "waiting" },
      waiting,
      (events) => events.filter((event) => event.event === "comment").length >= 2,
    );
    await until(() => engine.stats().queued === 1, "the second request to queue");

    const refused = await post({ message: "No room for me", conversation_id: "refused" });
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toMatch(/^\d+$/);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("overloaded");
    expect(rows("refused")).toEqual([]);

    const events = await waited;
    expect(events[0]!.event).toBe("start");
    expect(events.slice(1).some((event) => event.event === "comment" && event.data === "ping")).toBe(true);
    expect(events.some((event) => event.event === "delta")).toBe(false);

    // Leaving while still queued: the user message stays, no reply is stored, the queue empties.
    waiting.abort();
    await until(() => engine.stats().queued === 0, "the waiter to leave the queue");
    running.abort();
    await until(() => engine.stats().busy === 0 && rows("busy").length === 2, "the running reply to stop");
    expect(rows("waiting")).toEqual([{ role: "user", content: "I will wait", finish_reason: null }]);
    expect(rows("busy")[1]!.finish_reason).toBe("cancelled");
  });

  test("after all that, the service answers normally", async () => {
    const response = await post({ message: "Still there?", conversation_id: "after", max_tokens: 3 });
    expect(response.status).toBe(200);
    const body = (await response.json()) as { message: { finish_reason: string; user_id: number } };
    expect(body.message).toMatchObject({ finish_reason: "length", user_id: userId });
  });
});

describe("a failure after the stream began", () => {
  test("becomes an error event, and the stream ends", async () => {
    const response = await post({ message: "Run until the engine goes away", conversation_id: "doomed", stream: true });
    expect(response.status).toBe(200);
    const events: SseEvent[] = [];
    for await (const event of readSse(response)) {
      events.push(event);
      // Pulling the engine out from under a running reply is a failure the client cannot cause.
      if (event.event === "delta" && events.filter((e) => e.event === "delta").length === 1) void engine.close();
    }
    const last = events.at(-1)!;
    expect(last.event).toBe("error");
    const error = (last.data as { error: { code: string; message: string; request_id: string } }).error;
    expect(error.code).toBe("internal");
    expect(error.message).toBe("internal error");
    expect(error.request_id).toBe(response.headers.get("x-request-id")!);
    expect(rows("doomed")).toEqual([{ role: "user", content: "Run until the engine goes away", finish_reason: null }]);
  });
});
