/**
 * Kept responses on every backend: stored as they start, ended once, chains walked back within a
 * bound and ending at a deleted link, every read scoped to the response's user.
 */
import { describe, expect, test } from "bun:test";
import { ABANDONED, type ConversationItem, type NewResponse } from "../../src/db/types";
import { backends, withSeed } from "../support";

const said = (id: string, text: string): ConversationItem => ({ type: "message", id, role: "user", text });

for (const backend of backends()) {
  describe.skipIf(backend.missing !== undefined)(`on ${backend.name}`, () => {
    test(
      "a chain: created in progress, ended, walked back to maxChars, ended by a deletion; another user sees none of it",
      withSeed(async (random) => {
        const { storage } = await backend.open("responses");
        const { userId } = await storage.keys.create("alice", "user");
        const other = await storage.keys.create("bob", "user");
        const ids: string[] = [];
        const links: { id: string; input: ConversationItem[]; output: ConversationItem[] }[] = [];
        for (let i = 0; i < 12; i++) {
          const id = `resp_${i}`;
          const input = [said(`msg_${i}_in`, `${i}:${"é".repeat(random.int(0, 40))}`)];
          const output: ConversationItem[] = [
            { type: "message", id: `msg_${i}`, role: "assistant", text: "ok".repeat(random.int(0, 20)) },
            { type: "toolCall", id: `fc_${i}`, callId: `call_${i}`, name: "f", arguments: '{"a": "ü"}' },
          ];
          const created: NewResponse = {
            id,
            userId,
            previousResponseId: ids.at(-1) ?? null,
            chainKey: "resp_0",
            conversationId: null,
            createdAt: 1_700_000_000_000 + i,
            model: "m",
            params: { n: i, store: true },
            input,
            background: i % 2 === 0,
          };
          await storage.responses.create(created, 60_000);
          expect(await storage.responses.get(userId, id)).toEqual({
            ...created,
            status: "in_progress",
            output: [],
            usage: null,
            finishReason: null,
            error: null,
          });
          const usage = { inputTokens: 10 + i, outputTokens: 3, cachedTokens: i };
          expect(await storage.responses.finish(id, { status: "completed", output, usage, finishReason: "stop", error: null })).toBe(true);
          expect(await storage.responses.get(userId, id)).toMatchObject({ status: "completed", output, usage, finishReason: "stop", error: null });
          ids.push(id);
          links.push({ id, input, output });
        }

        expect(await storage.responses.chain(userId, "resp_11", { maxChars: Number.MAX_SAFE_INTEGER })).toEqual(links);
        const chars = (link: (typeof links)[number]) =>
          [...link.input, ...link.output].reduce(
            (sum, item) => sum + (item.type === "message" ? item.text.length : item.type === "toolCall" ? item.name.length + item.arguments.length : 0),
            0,
          );
        for (const maxChars of [1, random.int(2, 100), random.int(100, 400)]) {
          let start = links.length;
          let total = 0;
          while (start > 0 && total < maxChars) total += chars(links[--start]!);
          expect(await storage.responses.chain(userId, "resp_11", { maxChars })).toEqual(links.slice(start));
        }

        for (const read of [storage.responses.get(other.userId, "resp_3"), storage.responses.delete(other.userId, "resp_3")])
          expect(await read).toBeUndefined();
        expect(await storage.responses.requestCancel(other.userId, "resp_4")).toBe(false);
        expect(await storage.responses.cancelRequested("resp_4")).toBe(false);
        expect(await storage.responses.requestCancel(userId, "resp_4")).toBe(true);
        expect(await storage.responses.cancelRequested("resp_4")).toBe(true);

        // A background response's events: kept once by their number, read after one, in order.
        const events = Array.from({ length: 7 }, (_, seq) => ({
          seq,
          type: seq === 6 ? "response.completed" : "response.output_text.delta",
          text: `event: x\ndata: {"n":${seq}}\n\n`,
        }));
        await storage.responses.appendEvents("resp_4", events.slice(0, 4));
        await storage.responses.appendEvents("resp_4", events.slice(3));
        expect(await storage.responses.events("resp_4", -1, 100)).toEqual(events);
        expect(await storage.responses.events("resp_4", 2, 3)).toEqual(events.slice(3, 6));
        expect((await storage.responses.delete(userId, "resp_4"))?.background).toBe(true);
        expect(await storage.responses.events("resp_4", -1, 100)).toEqual([]);
        links.splice(4, 1);
        expect(await storage.responses.chain(other.userId, "resp_11", { maxChars: 100 })).toEqual([]);

        expect((await storage.responses.delete(userId, "resp_5"))?.chainKey).toBe("resp_0");
        expect(await storage.responses.get(userId, "resp_5")).toBeUndefined();
        expect(await storage.responses.finish("resp_5", { status: "failed", output: [], usage: null, finishReason: null, error: "x" })).toBe(false);
        expect(await storage.responses.chain(userId, "resp_11", { maxChars: Number.MAX_SAFE_INTEGER })).toEqual(links.slice(5));

        // Expiry: those created before the bound that have ended, of every user; a running one stays.
        await storage.responses.create(
          {
            id: "resp_running",
            userId: other.userId,
            previousResponseId: null,
            chainKey: "resp_running",
            conversationId: null,
            createdAt: 1_600_000_000_000,
            model: "m",
            params: {},
            input: [],
            background: true,
          },
          60_000,
        );
        expect(await storage.responses.count()).toBe(11);
        expect(await storage.responses.expire(1_700_000_000_000 + 3)).toBe(3);
        expect((await storage.responses.get(userId, "resp_3"))?.id).toBe("resp_3");
        expect(await storage.responses.get(userId, "resp_2")).toBeUndefined();
        expect((await storage.responses.get(other.userId, "resp_running"))?.status).toBe("in_progress");
        expect(await storage.responses.count()).toBe(8);

        // A lease that ran out: its process died, so it is read (and kept) as failed; a renewed one runs on.
        const running = (id: string, leaseMs: number) =>
          storage.responses.create(
            {
              id,
              userId,
              previousResponseId: null,
              chainKey: id,
              conversationId: null,
              createdAt: 1_900_000_000_000,
              model: "m",
              params: {},
              input: [],
              background: false,
            },
            leaseMs,
          );
        await running("resp_dead", -1);
        await running("resp_alive", -1);
        await storage.responses.renew(["resp_alive"], 60_000);
        expect(await storage.responses.get(userId, "resp_dead")).toMatchObject({ status: "failed", error: ABANDONED });
        expect((await storage.responses.get(userId, "resp_alive"))?.status).toBe("in_progress");
        expect(await storage.responses.expire(2_000_000_000_000)).toBe(8);
        expect((await storage.responses.get(userId, "resp_alive"))?.status).toBe("in_progress");

        // A response answered in a conversation is deleted with it, and its events.
        const conversation = await storage.conversations.findOrCreate(userId, "conv_with_responses");
        await storage.responses.create(
          {
            id: "resp_in",
            userId,
            previousResponseId: null,
            chainKey: String(conversation.id),
            conversationId: conversation.id,
            createdAt: 1_800_000_000_000,
            model: "m",
            params: {},
            input: [],
            background: true,
          },
          60_000,
        );
        await storage.responses.appendEvents("resp_in", [{ seq: 0, type: "response.created", text: "event: response.created\n\n" }]);
        expect((await storage.responses.get(userId, "resp_in"))?.conversationId).toBe(conversation.id);
        await storage.conversations.delete(userId, "conv_with_responses");
        expect(await storage.responses.get(userId, "resp_in")).toBeUndefined();
        expect(await storage.responses.events("resp_in", -1, 10)).toEqual([]);
        expect(await storage.responses.count()).toBe(2);
        await storage.close();
      }),
    );
  });
}
