import { describe, expect, test } from "bun:test";
import { backends } from "../support";

for (const backend of backends()) {
  describe.skipIf(backend.missing !== undefined)(`message counts on ${backend.name}`, () => {
    test("the stored message counts follow inserts and deletes, per user and per conversation", async () => {
      const { storage, query } = await backend.open("counts");
      const { userId } = await storage.keys.create("carol", "user");
      const a = await storage.conversations.findOrCreate(userId, "a");
      const b = await storage.conversations.findOrCreate(userId, "b");
      for (let i = 0; i < 5; i++) await storage.conversations.addMessage(i < 3 ? a : b, { role: "user", content: `m${i}` });
      await query("DELETE FROM messages WHERE id = (SELECT min(id) FROM messages)");

      // count(*) is a bigint in PostgreSQL, which its driver hands out as a string.
      const counted = async (sql: string) =>
        (await query(sql)).map((row) => Object.fromEntries(Object.entries(row).map(([name, value]) => [name, Number(value)])));
      expect(await counted("SELECT user_id, message_count FROM user_message_counts")).toEqual(
        await counted("SELECT user_id, count(*) AS message_count FROM messages GROUP BY user_id"),
      );
      expect(await counted("SELECT conversation_id, message_count FROM conversation_message_counts ORDER BY conversation_id")).toEqual([
        { conversation_id: a.id, message_count: 2 },
        { conversation_id: b.id, message_count: 2 },
      ]);
      await storage.close();
    });
  });
}
