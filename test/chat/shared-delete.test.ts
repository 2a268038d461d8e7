/**
 * Two nodes (two chat services on one PostgreSQL, each holding conversations by lease): deleting a
 * conversation on one while its turn runs on the other waits for that turn through the lease, and
 * then deletes it all, the reply included.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ChatService, type TurnInput } from "../../src/chat/service";
import { oneEngine, TurnRunner } from "../../src/chat/turn-runner";
import type { ConversationLeases, Storage } from "../../src/db/storage";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, postgresBackend, testEngine, until } from "../support";

allowSlowTests();

const backend = postgresBackend();

describe.skipIf(backend.missing !== undefined)("deleting a conversation whose turn runs on another node", () => {
  let storage: Storage;
  let engine: Engine;
  let userId: number;
  /** Lease calls the deleting node has made. */
  let deleterLeases = 0;

  beforeAll(async () => {
    ({ storage } = await backend.open("shared-delete"));
    ({ userId } = await storage.keys.create("alice", "user"));
    engine = await testEngine();
  });
  afterAll(async () => {
    await engine.close();
    await storage.close();
  });

  const node = (leases: ConversationLeases) =>
    new ChatService(storage.conversations, new TurnRunner(oneEngine(() => engine)), { shared: { leases, ttlMs: 60_000 } });

  test("waits for the turn, then deletes the conversation with its reply", async () => {
    const counted: ConversationLeases = {
      lease: (...args) => (deleterLeases++, storage.leases!.lease(...args)),
      release: (...args) => storage.leases!.release(...args),
    };
    const [running, deleting] = [node(storage.leases!), node(counted)];
    const input: TurnInput = { userId, conversationId: "shared", message: "Hello", sampling: { temperature: 0 }, maxTokens: 8 };
    const turn = running.turn(input);
    // The turn has stored its message and holds the lease; suspended here, it stays running.
    expect((await turn.next()).value).toMatchObject({ type: "start" });
    let deleted: boolean | undefined;
    const deletion = deleting.delete(userId, "shared").then((result) => (deleted = result));
    await until(() => deleterLeases >= 3, "the delete to wait on the lease a few times");
    expect(deleted).toBeUndefined();
    expect(await storage.conversations.find(userId, "shared")).toBeDefined();

    let result: IteratorResult<unknown, unknown>;
    do result = await turn.next();
    while (!result.done);
    expect(result.value).toMatchObject({ message: { role: "assistant" } });
    expect(await deletion).toBe(true);
    expect(await storage.conversations.find(userId, "shared")).toBeUndefined();
    expect((await storage.messages.list({ userId, sortField: "id", sortDirection: "asc", limit: 10, offset: 0 })).total).toBe(0);
  });
});
