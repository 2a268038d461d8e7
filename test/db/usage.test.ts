/**
 * Token usage on every backend: replies' tokens added to their user's day, concurrently without a
 * lost update, read back from a day on, oldest first, one user's apart from another's.
 */
import { describe, expect, test } from "bun:test";
import { backends, withSeed } from "../support";

for (const backend of backends()) {
  describe.skipIf(backend.missing !== undefined)(`on ${backend.name}`, () => {
    test(
      "concurrent adds to one day sum exactly; days read from a day on, oldest first, per user",
      withSeed(async (random) => {
        const { storage } = await backend.open("usage");
        const alice = (await storage.keys.create("alice", "user")).userId;
        const bob = (await storage.keys.create("bob", "user")).userId;
        const adds = Array.from({ length: 40 }, () => ({
          day: random.pick(["2026-11-24", "2026-11-25", "2026-11-26"]),
          prompt: random.int(0, 500),
          completion: random.int(0, 200),
        }));
        await Promise.all([
          ...adds.map(({ day, prompt, completion }) => storage.usage.add(alice, day, prompt, completion)),
          storage.usage.add(bob, "2026-11-26", 7, 3),
        ]);
        const expected = ["2026-11-25", "2026-11-26"].flatMap((day) => {
          const those = adds.filter((add) => add.day === day);
          if (those.length === 0) return [];
          return [
            { day, promptTokens: those.reduce((sum, add) => sum + add.prompt, 0), completionTokens: those.reduce((sum, add) => sum + add.completion, 0) },
          ];
        });
        expect(await storage.usage.days(alice, "2026-11-25")).toEqual(expected);
        expect(await storage.usage.days(bob, "2026-11-01")).toEqual([{ day: "2026-11-26", promptTokens: 7, completionTokens: 3 }]);
        expect(await storage.usage.days(bob, "2026-11-27")).toEqual([]);
      }),
    );
  });
}
