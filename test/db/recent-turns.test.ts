import { afterAll, expect, test } from "bun:test";
import type { StoredTurn } from "../../src/db/types";
import { testDb, withSeed } from "../support";

const db = testDb("recent-turns");
const { userId } = await db.keys.create("alice", "user");
afterAll(() => db.storage.close());

test(
  "recentTurns: the newest turns oldest first, up to the one that reaches maxChars, of that conversation only",
  withSeed(async (random) => {
    const conversation = await db.storage.conversations.findOrCreate(userId, "long");
    const other = await db.storage.conversations.findOrCreate(userId, "other");
    const base = Date.parse("2026-11-22T10:00:00.000Z");
    const stored: { turn: StoredTurn; createdAt: number; id: number }[] = [];
    for (let i = 0; i < 40; i++) {
      // Times shuffled and often equal: the order is by time, then by insertion.
      const createdAt = base + random.int(0, 9) * 1000;
      const turn: StoredTurn = { role: i % 2 === 0 ? "user" : "assistant", content: `${i}:${"x".repeat(random.int(0, 50))}` };
      const { id } = await db.storage.conversations.addMessage(conversation, { ...turn, createdAt });
      stored.push({ turn, createdAt, id });
      await db.storage.conversations.addMessage(other, { role: "user", content: "elsewhere", createdAt });
    }
    const all = stored.sort((a, b) => a.createdAt - b.createdAt || a.id - b.id).map((row) => row.turn);

    expect(await db.storage.conversations.recentTurns(conversation.id, { maxChars: Number.MAX_SAFE_INTEGER })).toEqual(all);
    for (const maxChars of [1, random.int(2, 200), random.int(200, 1_000)]) {
      let start = all.length;
      let chars = 0;
      while (start > 0 && chars < maxChars) chars += all[--start]!.content.length;
      expect(await db.storage.conversations.recentTurns(conversation.id, { maxChars })).toEqual(all.slice(start));
    }
  }),
);
