import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ChatService } from "../../src/chat/service";
import { oneEngine, TurnRunner } from "../../src/chat/turn-runner";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, bearer, postChat, readSse, type Served, serveApp, testDb, testEngine, until } from "../support";

allowSlowTests();

const db = testDb("limits");
const alice = await db.keys.create("alice", "user");
const bob = await db.keys.create("bob", "user");
const admin = await db.keys.create("ops", "admin");

describe("body size", () => {
  const server = serveApp({ storage: db.storage, limits: { bodyLimitBytes: 4096, pictureBodyLimitBytes: 4096 } });
  afterAll(() => server.stop());

  test("an endless body is refused with 413 after reading little more than the limit", async () => {
    let pulled = 0;
    const endless = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (pulled > 50_000_000) return controller.close();
        pulled += 16_384;
        controller.enqueue(new Uint8Array(16_384).fill(0x20));
      },
    });
    const response = await fetch(`${server.url}/api/v1.0/chat`, {
      method: "POST",
      headers: { ...bearer(alice.key), "content-type": "application/json" },
      body: endless,
    });
    expect(response.status).toBe(413);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe("payload_too_large");
    // What the client had produced when the answer came: far below the 50 MB it would send.
    expect(pulled).toBeLessThan(5_000_000);
  });
});

describe("body size on routes that may carry pictures", () => {
  const server = serveApp({ storage: db.storage, limits: { bodyLimitBytes: 4096, pictureBodyLimitBytes: 16_384 } });
  afterAll(() => server.stop());

  test("a chat route reads a body up to the picture limit; a route that takes no pictures stays within the body limit", async () => {
    const post = (path: string, bytes: number) =>
      fetch(`${server.url}${path}`, {
        method: "POST",
        headers: { ...bearer(alice.key), "content-type": "application/json" },
        body: JSON.stringify({ images: ["A".repeat(bytes)] }),
      });
    // Read, then refused for what it says (no model here), not for its size: a picture's bytes
    // (test/http/text-beside-pictures.test.ts holds text to the body limit).
    for (const path of ["/api/v1.0/chat", "/v1/chat/completions", "/v1/messages", "/v1/responses", "/api/chat"]) {
      expect({ path, status: (await post(path, 8192)).status }).not.toEqual({ path, status: 413 });
      expect({ path, status: (await post(path, 20_000)).status }).toEqual({ path, status: 413 });
    }
    expect((await post("/v1/embeddings", 8192)).status).toBe(413);
  });
});

describe("body time", () => {
  const server = serveApp({ storage: db.storage, limits: { bodyTimeoutMs: 300 } });
  afterAll(() => server.stop());

  test("a body trickled in slower than the limit gets 408 and the connection is closed", async () => {
    const { hostname, port } = new URL(server.url);
    const answer = Promise.withResolvers<string>();
    let received = "";
    const socket = await Bun.connect({
      hostname,
      port: Number(port),
      socket: {
        data: (_socket, data) => void (received += new TextDecoder().decode(data)),
        close: () => answer.resolve(received),
        error: () => answer.resolve(received),
      },
    });
    socket.write(
      `POST /api/v1.0/chat HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${alice.key}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{`,
    );
    // One byte every 100 ms: the whole body would take 10 s.
    const trickle = setInterval(() => socket.write(" "), 100);
    const text = await Promise.race([answer.promise, Bun.sleep(5_000).then(() => `no answer; got: ${received}`)]);
    clearInterval(trickle);
    socket.end();
    expect(text).toStartWith("HTTP/1.1 408");
    expect(text.toLowerCase()).toContain("connection: close");
    expect(JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4))).toMatchObject({ error: { code: "request_timeout" } });
  });
});

describe("per-key rate limit", () => {
  const server = serveApp({ storage: db.storage, limits: { rateLimitPerMinute: 3 } });
  afterAll(() => server.stop());
  const list = (key: string, query = "") => fetch(`${server.url}/api/v1.0/chat/messages${query}`, { headers: bearer(key) });

  test("every response carries the limit headers; the request past the limit gets 429 with Retry-After", async () => {
    const seen: [number, string | null][] = [];
    for (let i = 0; i < 3; i++) {
      // The third is a 422: refused requests still count and still carry the headers.
      const response = await list(alice.key, i === 2 ? "?rows_per_page=0" : "");
      expect(response.headers.get("x-ratelimit-limit")).toBe("3");
      expect(Number(response.headers.get("x-ratelimit-reset"))).toBeGreaterThan(0);
      seen.push([response.status, response.headers.get("x-ratelimit-remaining")]);
    }
    expect(seen).toEqual([
      [200, "2"],
      [200, "1"],
      [422, "0"],
    ]);
    const limited = await list(alice.key);
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(limited.headers.get("x-ratelimit-remaining")).toBe("0");
    expect(((await limited.json()) as { error: { code: string } }).error.code).toBe("rate_limited");
  });

  test("keys are limited separately", async () => {
    expect((await list(bob.key)).status).toBe(200);
  });

  test("a limit of 0 turns it off", async () => {
    const open = serveApp({ storage: db.storage, limits: { rateLimitPerMinute: 0 } });
    for (let i = 0; i < 10; i++) {
      const response = await fetch(`${open.url}/api/v1.0/chat/messages`, { headers: bearer(bob.key) });
      expect(response.status).toBe(200);
      expect(response.headers.get("x-ratelimit-limit")).toBeNull();
    }
    await open.stop();
  });
});

describe("streams per key and the time cap on a reply", () => {
  // bench-small: random weights, never ends a reply by itself.
  let engine: Engine;
  let server: Served;
  beforeAll(async () => {
    engine = await testEngine({ preset: "bench-small", parallel: 2, contextSize: 512 });
    const chat = new ChatService(
      db.storage.conversations,
      new TurnRunner(
        oneEngine(() => engine),
        { generationTimeoutMs: 300 },
      ),
    );
    server = serveApp({ storage: db.storage, engine, chat, limits: { maxStreamsPerKey: 1 } });
  });
  afterAll(async () => {
    await server.stop();
    await engine.close();
  });
  const post = (key: string, body: Record<string, unknown>) => postChat(server.url, key, { max_tokens: 4096, ...body });

  test("a second concurrent stream of one key gets 429; the reply cut by the time cap is stored as length", async () => {
    const first = await post(alice.key, { message: "Talk", conversation_id: "capped", stream: true });
    expect(first.status).toBe(200);
    const events = readSse(first);
    expect((await events.next()).value?.event).toBe("start");

    const second = await post(alice.key, { message: "Me too", conversation_id: "other", stream: true });
    expect(second.status).toBe(429);
    expect(second.headers.get("retry-after")).toBe("1");
    // Another key is not affected, and a non-streamed request is not a stream.
    const bobs = await post(bob.key, { message: "Hi", conversation_id: "bob", max_tokens: 2 });
    expect(bobs.status).toBe(200);

    let done: { message: { finish_reason: string; content: string } } | undefined;
    for await (const event of events) if (event.event === "done") done = event.data as typeof done;
    expect(done?.message.finish_reason).toBe("length");
    expect(done?.message.content.length).toBeGreaterThan(0);

    // The stream is over, so the key may open another.
    const third = await post(alice.key, { message: "Again", conversation_id: "again", stream: true, max_tokens: 2 });
    expect(third.status).toBe(200);
    await third.text();
  });
});

describe("the queue", () => {
  // bench-small never ends a reply by itself: the first turn holds its sequence until cancelled.
  let engine: Engine;
  let server: Served;
  beforeAll(async () => {
    engine = await testEngine({ preset: "bench-small", parallel: 1, queueMax: 2, contextSize: 512 });
    server = serveApp({ storage: db.storage, engine });
  });
  afterAll(async () => {
    await server.stop();
    await engine.close();
  });

  test("turns waiting for their conversation's previous turn count against PARLEY_QUEUE_MAX", async () => {
    const leave = new AbortController();
    const holder = await postChat(server.url, alice.key, { message: "Talk", conversation_id: "one", stream: true, max_tokens: 4096 }, leave.signal);
    const events = readSse(holder);
    for (let step = await events.next(); !step.done && step.value.event !== "delta"; step = await events.next());

    // Room for two more (parallel 1 + queue 2), though all of them wait for one conversation.
    const waiting = [1, 2].map(() => postChat(server.url, alice.key, { message: "Me next", conversation_id: "one", max_tokens: 1 }));
    const turns = async () =>
      Number(/^parley_chat_turns (\d+)$/m.exec(await (await fetch(`${server.url}/metrics`, { headers: bearer(admin.key) })).text())?.[1]);
    await until(async () => (await turns()) === 3, "the two to be waiting");
    const refused = await Promise.all([3, 4].map(() => postChat(server.url, bob.key, { message: "And me", conversation_id: "two", max_tokens: 1 })));
    expect(refused.map((response) => response.status)).toEqual([503, 503]);

    leave.abort();
    expect((await Promise.all(waiting)).map((response) => response.status)).toEqual([200, 200]);
  });
});
