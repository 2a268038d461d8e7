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
          await storage.conversations.addMessage(conversation, {
            role: i % 2 ? "assistant" : "user",
            content: `${id} says ${"é".repeat(120)} ${i}`,
            createdAt: start + offset,
          });
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
      const answer = await storage.conversations.addMessage(conversation, {
        role: "assistant",
        content: "Because.",
        reasoning: "They ask why. 🤔",
        finishReason: "stop",
      });
      const plain = await storage.conversations.addMessage(conversation, { role: "assistant", content: "Also.", finishReason: "stop" });
      expect([question.reasoning, answer.reasoning, plain.reasoning]).toEqual([null, "They ask why. 🤔", null]);
      const { rows } = await storage.messages.list({ userId, conversationId: "thinking", sortField: "id", sortDirection: "asc", limit: 10, offset: 0 });
      expect(rows.map((row) => [row.content, row.reasoning])).toEqual([
        ["Why?", null],
        ["Because.", "They ask why. 🤔"],
        ["Also.", null],
      ]);
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

    test("items: stored in order beside the messages, never listed or counted by the native API, paged, deleted one by one", async () => {
      const { userId } = await storage.keys.create("items-owner", "user");
      const created = await storage.conversations.findOrCreate(userId, "conv_items", { topic: "weather" });
      expect(created.created).toBe(true);
      expect(await storage.conversations.find(userId, "conv_items")).toMatchObject({ id: created.id, metadata: { topic: "weather" } });
      expect(await storage.conversations.setMetadata(userId, "conv_items", { topic: "rain" })).toMatchObject({ metadata: { topic: "rain" } });
      expect(await storage.conversations.setMetadata(userId + 1000, "conv_items", {})).toBeUndefined();
      const at = start + 1_000_000;
      await storage.conversations.addMessages(created, [
        { role: "user", content: "Be brief.", item: { type: "message", role: "developer" }, itemId: "msg_dev", createdAt: at },
        { role: "user", content: "Weather in Paris?", itemId: "msg_ask", createdAt: at },
        {
          role: "assistant",
          content: "",
          item: { type: "toolCall", callId: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' },
          itemId: "fc_1",
          createdAt: at,
        },
        { role: "user", content: '{"t": 21}', item: { type: "toolResult", callId: "call_1" }, itemId: "fco_1", createdAt: at },
        { role: "assistant", content: "21 degrees.", reasoning: "It said 21.", itemId: "msg_answer", createdAt: at + 1 },
      ]);
      const listed = await storage.messages.list({ userId, conversationId: "conv_items", sortField: "created_at", sortDirection: "asc", limit: 10, offset: 0 });
      expect(listed.rows.map((row) => [row.role, row.content])).toEqual([
        ["user", "Weather in Paris?"],
        ["assistant", "21 degrees."],
      ]);
      expect(listed.total).toBe(2);
      expect((await storage.messages.list({ userId, sortField: "id", sortDirection: "desc", limit: 10, offset: 0 })).total).toBe(2);
      const [summary] = (await storage.conversations.list({ userId, limit: 10, offset: 0 })).rows;
      expect(summary).toMatchObject({ conversationId: "conv_items", messageCount: 2, title: "Weather in Paris?" });

      const all = await storage.conversations.rows(created.id, { order: "asc", limit: 10 });
      expect(all?.map((row) => row.itemId)).toEqual(["msg_dev", "msg_ask", "fc_1", "fco_1", "msg_answer"]);
      expect(all?.[4]).toMatchObject({ role: "assistant", content: "21 degrees.", reasoning: "It said 21.", createdAt: at + 1 });
      expect(all?.[2]?.item).toEqual({ type: "toolCall", callId: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' });
      expect((await storage.conversations.rows(created.id, { order: "desc", from: "fc_1", limit: 2 }))?.map((row) => row.itemId)).toEqual(["fc_1", "msg_ask"]);
      expect((await storage.conversations.rows(created.id, { order: "asc", from: "fc_1", limit: 9 }))?.map((row) => row.itemId)).toEqual([
        "fc_1",
        "fco_1",
        "msg_answer",
      ]);
      expect(await storage.conversations.rows(created.id, { order: "asc", from: "msg_none", limit: 9 })).toBeUndefined();
      expect((await storage.conversations.recentTurns(created.id, { maxChars: 1_000 })).map((turn) => turn.item?.type ?? turn.role)).toEqual([
        "message",
        "user",
        "toolCall",
        "toolResult",
        "assistant",
      ]);

      expect(await storage.conversations.deleteRow(created.id, "msg_answer", true)).toBe(true);
      expect((await storage.conversations.row(created.id, "msg_answer"))?.reasoning).toBeUndefined();
      expect(await storage.conversations.deleteRow(created.id, "fc_1", false)).toBe(true);
      expect(await storage.conversations.deleteRow(created.id, "msg_ask", false)).toBe(true);
      expect(await storage.conversations.deleteRow(created.id, "msg_ask", false)).toBe(false);
      expect((await storage.conversations.list({ userId, limit: 10, offset: 0 })).rows[0]).toMatchObject({ messageCount: 1, title: "" });
      expect((await storage.messages.list({ userId, sortField: "id", sortDirection: "desc", limit: 10, offset: 0 })).total).toBe(1);
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
