import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Storage } from "../../src/db/storage";
import { backends, type OpenedBackend, testDb } from "../support";

const start = Date.parse("2026-01-01T00:00:00Z");

for (const backend of backends()) {
  describe.skipIf(backend.missing !== undefined)(`on ${backend.name}`, () => {
    let opened: OpenedBackend;
    let storage: Storage;
    beforeAll(async () => {
      opened = await backend.open("conversations");
      storage = opened.storage;
    });
    afterAll(() => storage.close());

    test("conversations are listed by their newest message, with counts and titles, paged", async () => {
      const { userId } = await storage.keys.create("dana", "user");
      const other = await storage.keys.create("erin", "user");
      const add = async (id: string, at: number[], owner = userId) => {
        const conversation = await storage.conversations.findOrCreate(owner, id);
        for (const [i, offset] of at.entries()) {
          await storage.conversations.addMessage(conversation, { role: i % 2 ? "assistant" : "user", content: `${id} says ${"é".repeat(120)} ${i}`, createdAt: start + offset });
        }
      };
      await add("old", [0, 1, 50]); // created first, but its last message is the newest
      await add("middle", [10, 11]);
      await add("new", [20]);
      await add("theirs", [100], other.userId);

      const all = await storage.conversations.list({ userId, limit: 10, offset: 0 });
      expect(all.total).toBe(3);
      expect(all.rows.map((row) => [row.conversationId, row.messageCount, row.updatedAt - start])).toEqual([
        ["old", 3, 50],
        ["new", 1, 20],
        ["middle", 2, 11],
      ]);
      const title = all.rows[0]!.title;
      expect([...title]).toHaveLength(100);
      expect(title).toBe(`old says ${"é".repeat(91)}`);

      const second = await storage.conversations.list({ userId, limit: 2, offset: 2 });
      expect(second).toEqual({ total: 3, rows: [all.rows[2]!] });
    });

    test("a reply's reasoning is stored apart from its content: returned, listed and given back with the turns; null otherwise", async () => {
      const { userId } = await storage.keys.create("hugo", "user");
      const conversation = await storage.conversations.findOrCreate(userId, "thinking");
      const question = await storage.conversations.addMessage(conversation, { role: "user", content: "Why?" });
      const answer = await storage.conversations.addMessage(conversation, { role: "assistant", content: "Because.", reasoning: "They ask why. 🤔", finishReason: "stop" });
      const plain = await storage.conversations.addMessage(conversation, { role: "assistant", content: "Also.", finishReason: "stop" });
      expect([question.reasoning, answer.reasoning, plain.reasoning]).toEqual([null, "They ask why. 🤔", null]);
      const { rows } = await storage.messages.list({ userId, conversationId: "thinking", sortField: "id", sortDirection: "asc", limit: 10, offset: 0 });
      expect(rows.map((row) => [row.content, row.reasoning])).toEqual([["Why?", null], ["Because.", "They ask why. 🤔"], ["Also.", null]]);
      expect(await storage.conversations.recentTurns(conversation.id, { maxChars: 1_000 })).toEqual([
        { role: "user", content: "Why?" },
        { role: "assistant", content: "Because.", reasoning: "They ask why. 🤔" },
        { role: "assistant", content: "Also." },
      ]);
    });

    test("deleting a conversation removes its messages and counts, only for its owner; the id starts afresh", async () => {
      const { userId } = await storage.keys.create("fred", "user");
      const intruder = await storage.keys.create("gina", "user");
      const kept = await storage.conversations.findOrCreate(userId, "kept");
      const doomed = await storage.conversations.findOrCreate(userId, "doomed");
      for (const conversation of [kept, doomed, doomed]) await storage.conversations.addMessage(conversation, { role: "user", content: "hi" });

      expect(await storage.conversations.delete(intruder.userId, "doomed")).toBeUndefined();
      expect(await storage.conversations.delete(userId, "doomed")).toEqual({ id: doomed.id, userId, externalId: "doomed" });
      expect(await storage.conversations.delete(userId, "doomed")).toBeUndefined();

      const messages = await storage.messages.list({ userId, sortField: "id", sortDirection: "asc", limit: 10, offset: 0 });
      expect(messages.total).toBe(1);
      expect(messages.rows.map((row) => row.conversationId)).toEqual(["kept"]);
      const [counted] = await opened.query(`SELECT count(*) AS n FROM conversation_message_counts WHERE conversation_id = ${doomed.id}`);
      expect(Number(counted!.n)).toBe(0);
      expect((await storage.conversations.list({ userId, limit: 10, offset: 0 })).rows.map((row) => row.conversationId)).toEqual(["kept"]);

      const again = await storage.conversations.findOrCreate(userId, "doomed");
      expect(again.created).toBe(true);
      expect(again.id).not.toBe(doomed.id);
    });
  });
}

describe("the SQLite plan", () => {
  const db = testDb("conversations-plan");
  const { storage } = db;
  afterAll(() => storage.close());

  test("the listing finds a user's conversations and their titles through indexes", () => {
    const statement = (storage.conversations as unknown as { listPage: { getQuery(): { sql: string; params: unknown[] } } }).listPage.getQuery();
    const values: Record<string, unknown> = { userId: 1, limit: 20, offset: 0 };
    const params = statement.params.map((param) => (typeof param === "object" && param !== null && "name" in param ? values[param.name as string] : param));
    const plan = storage.sqlite.query(`EXPLAIN QUERY PLAN ${statement.sql}`).all(...(params as [])) as { detail: string }[];
    const detail = plan.map((row) => row.detail).join("\n");
    expect(detail).toMatch(/SEARCH conversations USING (COVERING )?INDEX conversations_user_external_idx \(user_id=\?\)/);
    expect(detail).toContain("SEARCH conversation_message_counts USING INTEGER PRIMARY KEY");
    expect(detail).toContain("SEARCH messages USING INDEX messages_conversation_created_idx (conversation_id=?)");
    expect(detail).not.toMatch(/SCAN (conversations|messages)\b/);
  });
});
