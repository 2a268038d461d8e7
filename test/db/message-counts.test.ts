import { expect, test } from "bun:test";
import { testDb } from "../support";

test("the stored message counts follow inserts and deletes, per user and per conversation", async () => {
  const { storage, keys } = testDb("counts");
  const { userId } = await keys.create("carol", "user");
  const a = await storage.conversations.findOrCreate(userId, "a");
  const b = await storage.conversations.findOrCreate(userId, "b");
  for (let i = 0; i < 5; i++) await storage.conversations.addMessage(i < 3 ? a : b, { role: "user", content: `m${i}` });
  storage.sqlite.run("DELETE FROM messages WHERE id = (SELECT min(id) FROM messages)");

  const counted = (sql: string) => storage.sqlite.query(sql).all();
  expect(counted("SELECT user_id, message_count FROM user_message_counts")).toEqual(
    counted("SELECT user_id, count(*) AS message_count FROM messages GROUP BY user_id"),
  );
  expect(counted("SELECT conversation_id, message_count FROM conversation_message_counts ORDER BY conversation_id")).toEqual([
    { conversation_id: a.id, message_count: 2 },
    { conversation_id: b.id, message_count: 2 },
  ]);
  await storage.close();
});
