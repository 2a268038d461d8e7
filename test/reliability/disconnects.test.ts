import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ChatService } from "../../src/chat/service";
import { oneEngine, TurnRunner } from "../../src/chat/turn-runner";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, postChat, readSse, type Served, serveApp, testDb, testEngine, until, withSeed } from "../support";

allowSlowTests();

// 50 streams that go away: 2 that hold both sequences, 20 that leave while queued behind them,
// 20 that leave mid-reply after a random number of tokens, 8 that leave at a random moment
// (possibly before the response even began). The bench-small model never ends a reply by
// itself, so every reply that is stored was cut by its client.
const db = testDb("disconnects");
const { key } = await db.keys.create("alice", "user");
let engine: Engine;
let chat: ChatService;
let runner: TurnRunner;
let server: Served;

beforeAll(async () => {
  engine = await testEngine({ preset: "bench-small", parallel: 2, queueMax: 64, contextSize: 512 });
  runner = new TurnRunner(oneEngine(() => engine));
  chat = new ChatService(db.storage.conversations, runner);
  server = serveApp({ storage: db.storage, engine, chat, limits: { heartbeatMs: 100, maxStreamsPerKey: 64 } });
});
afterAll(async () => {
  await server.stop();
  await engine.close();
  await db.storage.close();
});

interface Client {
  conversation: string;
  /** Concatenated deltas received before leaving. */
  received: string;
  sawStart: boolean;
  deltas: number;
  leave(): void;
  /** Settles once the client has left (or its stream ended on its own, which must not happen). */
  gone: Promise<void>;
}

/** Opens a stream that reads in the background until `shouldLeave` says so, then aborts. */
function open(conversation: string, shouldLeave: (client: Client) => boolean = () => false, abortAfterMs?: number): Client {
  const controller = new AbortController();
  const client: Client = {
    conversation,
    received: "",
    sawStart: false,
    deltas: 0,
    leave: () => controller.abort(),
    gone: Promise.resolve(),
  };
  if (abortAfterMs !== undefined) setTimeout(() => controller.abort(), abortAfterMs);
  client.gone = (async () => {
    try {
      const response = await postChat(
        server.url,
        key,
        { message: `Talk forever (${conversation})`, conversation_id: conversation, stream: true, max_tokens: 4096, temperature: 1 },
        controller.signal,
      );
      expect(response.status).toBe(200);
      for await (const event of readSse(response)) {
        if (event.event === "start") client.sawStart = true;
        if (event.event === "delta") {
          client.deltas++;
          client.received += (event.data as { content: string }).content;
        }
        if (shouldLeave(client)) controller.abort();
      }
      throw new Error(`stream ${conversation} ended without its client leaving`);
    } catch (error) {
      if (!controller.signal.aborted) throw error;
    }
  })();
  return client;
}

const storedTurn = (conversation: string) =>
  db.storage.sqlite
    .query("SELECT m.role, m.content, m.finish_reason FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE c.external_id = ? ORDER BY m.id")
    .all(conversation) as { role: string; content: string; finish_reason: string | null }[];

const idle = () => {
  const stats = engine.stats();
  return stats.busy === 0 && stats.queued === 0 && runner.activeTurns === 0;
};

describe("clients that disconnect", () => {
  test(
    "50 dropped streams: every generation stops, every sequence is free, partial replies are cancelled, queued leavers have no reply",
    withSeed(async (random) => {
      const holders = [open("holder-0"), open("holder-1")];
      await until(() => holders.every((h) => h.deltas > 0), "both sequences to be generating", 20_000);

      const queued = Array.from({ length: 20 }, (_, i) => open(`queued-${i}`, (c) => c.sawStart && c.deltas === 0 && random.next() < 0.3));
      await Promise.all(queued.map((client) => client.gone));
      // They left while both sequences were taken: none of them can have generated a token.
      expect(queued.every((client) => client.sawStart && client.deltas === 0)).toBe(true);
      await until(() => engine.stats().queued === 0, "the queue to empty");
      for (const holder of holders) holder.leave();

      // First in the queue, so that some get a sequence and are cut mid-reply, others while waiting.
      const anytime = Array.from({ length: 8 }, (_, i) => open(`anytime-${i}`, undefined, random.int(0, 2000)));
      const midReply = Array.from({ length: 20 }, (_, i) => {
        const leaveAfter = random.int(1, 6);
        return open(`mid-${i}`, (c) => c.deltas >= leaveAfter);
      });
      const everyone = [...holders, ...queued, ...midReply, ...anytime];
      await Promise.all(everyone.map((client) => client.gone));

      await until(idle, "every sequence to be free and every turn to end", 20_000);
      const leftBehind = () =>
        db.storage.sqlite
          .query(
            "SELECT count(*) AS n, coalesce(sum(length(content)), 0) AS chars FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE c.external_id <> 'after'",
          )
          .get();
      const snapshot = leftBehind();
      // And the service still answers, from a free sequence. A whole turn later, anything the
      // leavers had still set going would have written by now.
      const response = await postChat(server.url, key, { message: "still there?", conversation_id: "after", max_tokens: 2 });
      expect(response.status).toBe(200);
      // Nothing is still generating in the background.
      expect(leftBehind()).toEqual(snapshot);
      expect(engine.stats()).toMatchObject({ busy: 0, queued: 0 });

      for (const client of queued) {
        expect(storedTurn(client.conversation), client.conversation).toEqual([
          { role: "user", content: `Talk forever (${client.conversation})`, finish_reason: null },
        ]);
      }
      for (const client of [...holders, ...midReply]) {
        const rows = storedTurn(client.conversation);
        expect(
          rows.map((row) => [row.role, row.finish_reason]),
          client.conversation,
        ).toEqual([
          ["user", null],
          ["assistant", "cancelled"],
        ]);
        // The stored reply is what the client saw, plus at most the few tokens made before the stop.
        expect(rows[1]!.content.startsWith(client.received), client.conversation).toBe(true);
        expect(rows[1]!.content.length).toBeLessThan(client.received.length + 400);
      }
      const outcomes = { nothing: 0, userOnly: 0, cancelled: 0 };
      for (const client of anytime) {
        const rows = storedTurn(client.conversation);
        const shape = rows.map((row) => `${row.role}:${row.finish_reason ?? "-"}`).join(",");
        // Whenever it left, a reply never exists without its user message and is never complete.
        expect(["", "user:-", "user:-,assistant:cancelled"], client.conversation).toContain(shape);
        if (client.deltas > 0) expect(shape).toBe("user:-,assistant:cancelled");
        outcomes[shape === "" ? "nothing" : shape === "user:-" ? "userOnly" : "cancelled"]++;
      }
      console.log(`disconnects: 20 left while queued, ${holders.length + midReply.length} mid-reply, random moments ${JSON.stringify(outcomes)}`);
    }),
    60_000,
  );
});
