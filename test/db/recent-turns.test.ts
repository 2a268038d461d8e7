import { describe, expect, test } from "bun:test";
import type { StoredTurn } from "../../src/db/types";
import { backends, withSeed } from "../support";

for (const backend of backends()) {
  describe.skipIf(backend.missing !== undefined)(`on ${backend.name}`, () => {
    test(
      "recentTurns: the newest turns oldest first, up to the one that reaches maxChars, of that conversation only",
      withSeed(async (random) => {
        const { storage } = await backend.open("recent-turns");
        const { userId } = await storage.keys.create("alice", "user");
        const conversation = await storage.conversations.findOrCreate(userId, "long");
        const other = await storage.conversations.findOrCreate(userId, "other");
        const base = Date.parse("2026-11-22T10:00:00.000Z");
        const stored: { turn: StoredTurn; createdAt: number; id: number }[] = [];
        for (let i = 0; i < 40; i++) {
          // Times shuffled and often equal: the order is by time, then by insertion.
          const createdAt = base + random.int(0, 9) * 1000;
          const turn: StoredTurn = { role: i % 2 === 0 ? "user" : "assistant", content: `${i}:${"x".repeat(random.int(0, 50))}` };
          const { id } = await storage.conversations.addMessage(conversation, { ...turn, createdAt });
          stored.push({ turn, createdAt, id });
          await storage.conversations.addMessage(other, { role: "user", content: "elsewhere", createdAt });
        }
        const all = stored.sort((a, b) => a.createdAt - b.createdAt || a.id - b.id).map((row) => row.turn);

        expect(await storage.conversations.recentTurns(conversation.id, { maxChars: Number.MAX_SAFE_INTEGER })).toEqual(all);
        for (const maxChars of [1, random.int(2, 200), random.int(200, 1_000)]) {
          let start = all.length;
          let chars = 0;
          while (start > 0 && chars < maxChars) chars += all[--start]!.content.length;
          expect(await storage.conversations.recentTurns(conversation.id, { maxChars })).toEqual(all.slice(start));
        }
        await storage.close();
      }),
    );

    test("a user message's pictures come back with it: in its turn, and in the listing", async () => {
      const { storage } = await backend.open("recent-turns-images");
      const { userId } = await storage.keys.create("alice", "user");
      const conversation = await storage.conversations.findOrCreate(userId, "pictures");
      const images = [
        { at: 4, base64: "iVBORw0KGgo=" },
        { at: 4, base64: "R0lGODlh" },
      ];
      const added = await storage.conversations.addMessage(conversation, { role: "user", content: "Look", images });
      expect(added.images).toEqual(images);
      await storage.conversations.addMessage(conversation, { role: "assistant", content: "I see" });
      expect(await storage.conversations.recentTurns(conversation.id, { maxChars: 100 })).toEqual([
        { role: "user", content: "Look", images },
        { role: "assistant", content: "I see" },
      ]);
      const page = await storage.messages.list({ userId, sortField: "id", sortDirection: "asc", limit: 10, offset: 0 });
      expect(page.rows.map((row) => row.images)).toEqual([images, null]);
      await storage.close();
    });
  });
}
