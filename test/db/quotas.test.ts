/**
 * Token quotas on every backend: a user's own quota over the default, holds that never let
 * concurrent takers pass the limit, settlements that count and end a hold at once, and holds
 * of a dead node that stop counting once expired.
 */
import { describe, expect, test } from "bun:test";
import { backends, withSeed } from "../support";

const NOW = Date.UTC(2026, 10, 26, 12);
const hold = (userId: number, holder: string, limit: number, need: number, want: number, expiresAt = NOW + 60_000) => ({
  userId,
  since: "2026-11-26",
  limit,
  need,
  want,
  holder,
  expiresAt,
});

for (const backend of backends()) {
  describe.skipIf(backend.missing !== undefined)(`on ${backend.name}`, () => {
    test("a user's own quota wins over the default; clearing one says whether there was one; listing shows both", async () => {
      const { storage } = await backend.open("quota-rules");
      const alice = (await storage.keys.create("alice", "user")).userId;
      const bob = (await storage.keys.create("bob", "user")).userId;
      expect(await storage.quotas.ruleFor(alice)).toBeUndefined();
      await storage.quotas.set(null, { tokens: 500, period: "day" });
      await storage.quotas.set(alice, { tokens: 90, period: "month" });
      await storage.quotas.set(alice, { tokens: 100, period: "month" });
      expect(await storage.quotas.ruleFor(alice)).toEqual({ tokens: 100, period: "month" });
      expect(await storage.quotas.ruleFor(bob)).toEqual({ tokens: 500, period: "day" });
      expect(await storage.quotas.list()).toEqual([
        { userId: null, user: null, tokens: 500, period: "day" },
        { userId: alice, user: "alice", tokens: 100, period: "month" },
      ]);
      expect(await storage.quotas.clear(alice)).toBe(true);
      expect(await storage.quotas.clear(alice)).toBe(false);
      expect(await storage.quotas.ruleFor(alice)).toEqual({ tokens: 500, period: "day" });
      expect(await storage.quotas.clear(null)).toBe(true);
      expect(await storage.quotas.ruleFor(bob)).toBeUndefined();
    });

    test(
      "concurrent holds never pass the limit; a settlement counts the reply and gives the rest back; a dead node's hold expires",
      withSeed(async (random) => {
        const { storage } = await backend.open("quota-holds");
        const alice = (await storage.keys.create("alice", "user")).userId;
        await storage.usage.add(alice, "2026-11-25", 1_000, 1_000); // yesterday's: not this period's
        await storage.usage.add(alice, "2026-11-26", 100, 20);
        const limit = 1_000;
        const asks = Array.from({ length: 30 }, (_, i) => ({ holder: `h${i}`, need: random.int(1, 60), want: random.int(60, 300) }));
        const taken = await Promise.all(asks.map((ask) => storage.quotas.hold(hold(alice, ask.holder, limit, ask.need, ask.want), NOW)));
        const granted = taken.reduce((sum, one) => sum + one.granted, 0);
        expect(granted).toBeLessThanOrEqual(limit - 120);
        // Whoever was refused saw too little left for what they needed.
        for (const [i, one] of taken.entries()) if (one.granted === 0) expect(limit - one.used - one.held).toBeLessThan(asks[i]!.need);
        expect(taken.filter((one) => one.granted > 0).length).toBeGreaterThan(1);
        expect(await storage.quotas.standing(alice, "2026-11-26", NOW)).toEqual({ used: 120, held: granted });

        const settled = taken.findIndex((one) => one.granted > 0);
        await storage.quotas.settle(asks[settled]!.holder, alice, "2026-11-26", 10, 5);
        expect(await storage.quotas.standing(alice, "2026-11-26", NOW)).toEqual({ used: 135, held: granted - taken[settled]!.granted });
        for (const ask of asks) await storage.quotas.release(ask.holder);
        expect(await storage.quotas.standing(alice, "2026-11-26", NOW)).toEqual({ used: 135, held: 0 });

        // A hold never settled (its node died) counts until it expires, then not at all.
        await storage.quotas.hold(hold(alice, "dead", limit, 1, 800, NOW + 1_000), NOW);
        expect((await storage.quotas.hold(hold(alice, "late", limit, 66, 100), NOW)).granted).toBe(0);
        expect((await storage.quotas.hold(hold(alice, "late", limit, 65, 100), NOW)).granted).toBe(65);
        await storage.quotas.release("late");
        expect((await storage.quotas.hold(hold(alice, "later", limit, 100, 100), NOW + 1_000)).granted).toBe(100);
      }),
    );

    test(
      "holds taken while others settle never pass the limit: each reply's tokens are counted as used or held, never neither",
      withSeed(async (random) => {
        const { storage } = await backend.open("quota-churn");
        const alice = (await storage.keys.create("alice", "user")).userId;
        const limit = 2_000;
        let granted = 0;
        const worker = async (w: number) => {
          for (let i = 0; i < 15; i++) {
            const holder = `w${w}-${i}`;
            const taken = await storage.quotas.hold(hold(alice, holder, limit, random.int(1, 20), random.int(20, 120)), NOW);
            if (taken.granted === 0) continue;
            granted += taken.granted;
            // A reply uses its hold, or less of it.
            await storage.quotas.settle(holder, alice, "2026-11-26", random.int(0, taken.granted), 0);
          }
        };
        await Promise.all(Array.from({ length: 12 }, (_, w) => worker(w)));
        const { used, held } = await storage.quotas.standing(alice, "2026-11-26", NOW);
        expect(held).toBe(0);
        expect(granted).toBeGreaterThan(limit);
        expect(used).toBeLessThanOrEqual(limit);
      }),
    );
  });
}
