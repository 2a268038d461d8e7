import { expect, test } from "bun:test";
import { ensureConversation, insertMessage } from "../../src/db/conversations";
import { testDb } from "../support";

test("the stored message counts follow inserts and deletes, per user and per conversation", () => {
  const { storage, keys } = testDb("counts");
  const { userId } = keys.create("carol", "user");
  const a = ensureConversation(storage.db, userId, "a");
  const b = ensureConversation(storage.db, userId, "b");
  for (let i = 0; i < 5; i++) insertMessage(storage.db, i < 3 ? a : b, { role: "user", content: `m${i}` });
  storage.sqlite.run("DELETE FROM messages WHERE id = (SELECT min(id) FROM messages)");

  const counted = (sql: string) => storage.sqlite.query(sql).all();
  expect(counted("SELECT user_id, message_count FROM user_message_counts")).toEqual(
    counted("SELECT user_id, count(*) AS message_count FROM messages GROUP BY user_id"),
  );
  expect(counted("SELECT conversation_id, message_count FROM conversation_message_counts ORDER BY conversation_id")).toEqual([
    { conversation_id: a.id, message_count: 2 },
    { conversation_id: b.id, message_count: 2 },
  ]);
  storage.close();
});
