import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { KeyedLock } from "../../src/chat/keyed-lock";
import { ChatService, type TurnInput } from "../../src/chat/service";
import { oneEngine, TurnRunner } from "../../src/chat/turn-runner";
import { Overloaded } from "../../src/errors";
import { wireError } from "../../src/http/errors";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, testDb, testEngine } from "../support";

allowSlowTests();

describe("KeyedLock", () => {
  test("holders of one key run in arrival order; other keys do not wait", async () => {
    const lock = new KeyedLock();
    const order: string[] = [];
    const first = await lock.acquire("a");
    const second = lock.acquire("a").then((release) => (order.push("a2"), release));
    const other = await lock.acquire("b");
    order.push("b1");
    other();
    first();
    (await second)();
    expect(order).toEqual(["b1", "a2"]);
    expect(lock.size).toBe(0);
  });

  test("a waiter that aborts passes the lock on instead of blocking the ones behind it", async () => {
    const lock = new KeyedLock();
    const first = await lock.acquire("k");
    const controller = new AbortController();
    const quitter = lock.acquire("k", controller.signal);
    const third = lock.acquire("k");
    controller.abort();
    await expect(quitter).rejects.toThrow();
    first();
    (await third)();
    expect(lock.size).toBe(0);
  });
});

describe("ChatService admission", () => {
  const db = testDb("service");
  let userId: number;
  let engine: Engine;
  beforeAll(async () => {
    ({ userId } = await db.keys.create("alice", "user"));
    // bench-small: random weights never end a reply, so "running" stays busy until aborted.
    engine = await testEngine({ preset: "bench-small", parallel: 1, queueMax: 0, contextSize: 256 });
  });
  afterAll(async () => {
    await engine.close();
    await db.storage.close();
  });

  const input = (conversationId: string, signal?: AbortSignal): TurnInput => ({
    userId,
    conversationId,
    message: "Hello",
    sampling: { temperature: 0 },
    maxTokens: 8,
    signal,
  });

  async function finish(service: ChatService, turn: TurnInput) {
    const generator = service.turn(turn);
    for (;;) {
      const step = await generator.next();
      if (step.done) return step.value;
    }
  }

  test("with no queue, a free sequence still serves; a busy one refuses before storing anything", async () => {
    const service = new ChatService(db.storage.conversations, new TurnRunner(oneEngine(() => engine)));
    expect((await finish(service, input("free")))?.message.finishReason).toBe("length");

    const controller = new AbortController();
    const running = service.turn({ ...input("running", controller.signal), maxTokens: 4096 });
    await running.next(); // start: the user message is stored
    await running.next(); // the first delta: the sequence is taken
    const refused = finish(service, input("refused"));
    await expect(refused).rejects.toBeInstanceOf(Overloaded);
    const count = db.storage.sqlite.query("SELECT count(*) AS n FROM conversations WHERE external_id = 'refused'").get() as { n: number };
    expect(count.n).toBe(0);
    controller.abort();
    let last = await running.next();
    while (!last.done) last = await running.next();
    expect(last.value?.message.finishReason).toBe("cancelled");
  });

  test("a delete waits behind the conversation's running turn, then removes its reply too", async () => {
    const service = new ChatService(db.storage.conversations, new TurnRunner(oneEngine(() => engine)));
    const controller = new AbortController();
    const running = service.turn({ ...input("deleted-while-busy", controller.signal), maxTokens: 4096 });
    await running.next(); // start
    await running.next(); // a delta: generating
    let settled = false;
    const deleting = service.delete(userId, "deleted-while-busy").then((deleted) => ((settled = true), deleted));
    for (let i = 0; i < 3; i++) await running.next(); // a few tokens later it still waits
    expect(settled).toBe(false);

    controller.abort();
    let last = await running.next();
    while (!last.done) last = await running.next();
    expect(last.value?.message.finishReason).toBe("cancelled");
    expect(await deleting).toBe(true);
    const left = await db.storage.messages.list({ userId, conversationId: "deleted-while-busy", sortField: "id", sortDirection: "asc", limit: 10, offset: 0 });
    expect(left).toEqual({ rows: [], total: 0 });
    expect(await service.delete(userId, "deleted-while-busy")).toBe(false);
  });

  test("while the model is loading, turns are refused with 503", async () => {
    const service = new ChatService(db.storage.conversations, new TurnRunner(oneEngine(() => undefined)));
    const error = await finish(service, input("early")).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Overloaded);
    expect(wireError(error as Overloaded)).toMatchObject({ code: "overloaded", status: 503 });
  });
});
