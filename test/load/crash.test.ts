import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { withDb } from "../reliability/support";
import { allowSlowTests, type ChildServer, postChat, readSse, startServer, tempDir, until, withSeed } from "../support";

allowSlowTests();

/*
 * Why acknowledged turns survive a SIGKILL: each message is its own committed transaction
 * before the server says anything about it (the `start` event after the user message, the 200
 * or `done` after the reply), and in WAL mode a commit has written its frames to the WAL file
 * before it returns. A killed process loses only what it had not yet committed; the next open
 * replays the WAL up to the last commit record, so the database is whole and every
 * acknowledged row is there. `synchronous = FULL` (src/db/sqlite/client.ts) adds an fsync of the WAL
 * on every commit, which carries the same promise past an OS crash or power loss — something a
 * SIGKILL cannot simulate (the kernel still holds the written pages), and NORMAL would not give:
 * under NORMAL the last commits before a power cut may roll back after they were acknowledged.
 */

const ADMIN_KEY = "crash-test-admin-key-0123456789abcdefgh";
const KILLS = 10;
const WORKERS = 6;
const dbPath = join(tempDir("crash"), "parley.db");
let current: ChildServer | undefined;
afterAll(() => current?.child.kill("SIGKILL"));

interface Acknowledged {
  userMessages: Set<number>;
  replies: Set<number>;
}
const acknowledged: Acknowledged = { userMessages: new Set(), replies: new Set() };

interface Reply {
  user_message: { id: number };
  message: { id: number };
}

/** One client: chats until the server goes away, recording every id the server acknowledged. */
async function client(server: ChildServer, worker: number, stopped: AbortSignal): Promise<number> {
  let turns = 0;
  for (let i = 0; !stopped.aborted; i++) {
    const stream = (worker + i) % 2 === 0;
    try {
      const response = await postChat(
        server.url,
        ADMIN_KEY,
        { message: `turn ${i} of worker ${worker}`, conversation_id: `c${(worker + i) % 4}`, stream, max_tokens: 24 },
        AbortSignal.timeout(15_000),
      );
      if (!stream) {
        if (response.status !== 200) continue;
        const reply = (await response.json()) as Reply;
        acknowledged.userMessages.add(reply.user_message.id);
        acknowledged.replies.add(reply.message.id);
      } else {
        for await (const event of readSse(response)) {
          if (event.event === "start") acknowledged.userMessages.add((event.data as Reply).user_message.id);
          if (event.event === "done") acknowledged.replies.add((event.data as Reply).message.id);
        }
      }
      turns++;
    } catch {
      // The server was killed mid-request: whatever it had acknowledged so far is recorded, and
      // nothing more will be until the next round.
      if (!stopped.aborted) await new Promise((resolve) => stopped.addEventListener("abort", resolve, { once: true }));
    }
  }
  return turns;
}

describe("crash safety", () => {
  test(
    `SIGKILL at random moments under concurrent chat traffic, ${KILLS} times: nothing acknowledged is lost`,
    withSeed(async (random) => {
      let turns = 0;
      for (let kill = 0; kill < KILLS; kill++) {
        current = await startServer({ dbPath, adminKey: ADMIN_KEY, env: { PARLEY_RATE_LIMIT: "0", PARLEY_PARALLEL: "2" } });
        const stopped = new AbortController();
        const clients = Array.from({ length: WORKERS }, (_, worker) => client(current!, worker, stopped.signal));
        // A random moment in the traffic: just after a random number of this round's replies.
        const killAt = acknowledged.replies.size + random.int(3, 8);
        await until(() => acknowledged.replies.size >= killAt, `${killAt} acknowledged replies`, 30_000);
        current.child.kill("SIGKILL");
        await current.child.exited;
        stopped.abort();
        turns += (await Promise.all(clients)).reduce((a, b) => a + b, 0);
      }
      console.log(
        `crash: ${KILLS} kills survived; ${turns} turns completed, ${acknowledged.userMessages.size} user messages and ${acknowledged.replies.size} replies acknowledged`,
      );
      // Each round must have done real work for the kills to have landed mid-traffic.
      expect(acknowledged.replies.size).toBeGreaterThan(KILLS * 2);

      withDb(dbPath, (db) => {
        expect(db.query("PRAGMA integrity_check").all()).toEqual([{ integrity_check: "ok" }]);
        expect(db.query("PRAGMA foreign_key_check").all()).toEqual([]);
        const rows = db.query("SELECT id, role FROM messages").all() as { id: number; role: string }[];
        const roleOf = new Map(rows.map((row) => [row.id, row.role]));
        const lostUser = [...acknowledged.userMessages].filter((id) => roleOf.get(id) !== "user");
        const lostReplies = [...acknowledged.replies].filter((id) => roleOf.get(id) !== "assistant");
        expect({ lostUser, lostReplies }).toEqual({ lostUser: [], lostReplies: [] });
        // Every reply directly follows a user message of its conversation: replies are stored only
        // after their user message, and turns of one conversation never interleave.
        const orphans = db
          .query(
            `SELECT r.id FROM messages r WHERE r.role = 'assistant' AND coalesce((
             SELECT p.role FROM messages p WHERE p.conversation_id = r.conversation_id AND p.id < r.id ORDER BY p.id DESC LIMIT 1
           ), 'none') <> 'user'`,
          )
          .all();
        expect(orphans).toEqual([]);
      });
    }),
    120_000,
  );

  test("after the kills, the server starts on the same data and serves normally", async () => {
    current = await startServer({ dbPath, adminKey: ADMIN_KEY });
    const chat = await fetch(`${current.url}/api/v1.0/chat`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ message: "still here?", conversation_id: "c0", max_tokens: 8 }),
    });
    expect(chat.status).toBe(200);
    expect(((await chat.json()) as { new_conversation: boolean }).new_conversation).toBe(false);
    const listed = await fetch(`${current.url}/api/v1.0/chat/messages?rows_per_page=100`, { headers: { authorization: `Bearer ${ADMIN_KEY}` } });
    expect(listed.status).toBe(200);
    const page = (await listed.json()) as { pagination: { total_rows: number } };
    expect(page.pagination.total_rows).toBeGreaterThanOrEqual(acknowledged.userMessages.size + 2);

    // A second server started by mistake on the same port must fail, not share the port
    // (SO_REUSEPORT) and silently answer half the connections from its own database.
    const port = new URL(current.url).port;
    const second = startServer({ dbPath: join(tempDir("crash-second"), "parley.db"), adminKey: ADMIN_KEY, env: { PARLEY_PORT: port } });
    await expect(second).rejects.toThrow(/EADDRINUSE|in use/);
    current.child.kill("SIGTERM");
    expect(await current.child.exited).toBe(0);
  });
});
