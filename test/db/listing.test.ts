import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { pageStatement } from "../../src/db/sqlite/messages";
import { bearer, type Served, serveApp, testDb } from "../support";

const db = testDb("listing");
const alice = await db.keys.create("alice", "user");
const bob = await db.keys.create("bob", "user");
const admin = await db.keys.create("root", "admin");
let server: Served;

interface Row {
  id: number;
  created_at: string;
  user_id: number;
  conversation_id: string;
  role: string;
}

// 250 messages over 3 conversations and 2 users; created_at repeats in runs of 3 so ties are common.
const expected = new Map<number, Row[]>();
beforeAll(async () => {
  const conversations = [
    await db.storage.conversations.findOrCreate(alice.userId, "trip-1"),
    await db.storage.conversations.findOrCreate(alice.userId, "trip-2"),
    await db.storage.conversations.findOrCreate(bob.userId, "trip-1"),
  ];
  const base = Date.parse("2026-11-22T10:00:00.000Z");
  for (let i = 0; i < 250; i++) {
    // Ids grow with i but times are shuffled: order by created_at differs from order by id.
    const conversation = conversations[i % 3]!;
    const createdAt = base + ((i * 37) % 250 - ((i * 37) % 250) % 3) * 1000;
    const role = i % 2 === 0 ? "user" : "assistant";
    const stored = await db.storage.conversations.addMessage(conversation, {
      role,
      content: `message ${i}`,
      createdAt,
      finishReason: role === "assistant" ? "stop" : null,
    });
    const rows = expected.get(conversation.userId) ?? [];
    rows.push({
      id: stored.id,
      created_at: new Date(createdAt).toISOString(),
      user_id: conversation.userId,
      conversation_id: conversation.externalId,
      role,
    });
    expected.set(conversation.userId, rows);
  }
  server = serveApp({ storage: db.storage });
});
afterAll(async () => {
  await server.stop();
  await db.storage.close();
});

async function list(key: string, query: string) {
  const response = await fetch(`${server.url}/api/v1.0/chat/messages?${query}`, { headers: bearer(key) });
  return { status: response.status, body: (await response.json()) as { data: Row[]; pagination: Record<string, number> } };
}

const sorters: Record<string, (a: Row, b: Row) => number> = {
  "created_at:asc": (a, b) => a.created_at.localeCompare(b.created_at) || a.id - b.id,
  "created_at:desc": (a, b) => b.created_at.localeCompare(a.created_at) || b.id - a.id,
  "id:asc": (a, b) => a.id - b.id,
  "id:desc": (a, b) => b.id - a.id,
};

describe("GET /api/v1.0/chat/messages paging", () => {
  for (const [sort, compare] of Object.entries(sorters)) {
    test(`walking every page of 7 with sort_by=${sort} returns each row once, in order`, async () => {
      const want = [...expected.get(alice.userId)!].sort(compare);
      const seen: Row[] = [];
      const pages = Math.ceil(want.length / 7);
      for (let page = 1; page <= pages + 1; page++) {
        const { status, body } = await list(alice.key, `rows_per_page=7&current_page=${page}&sort_by=${sort.replace(":", "%3A")}`);
        expect(status).toBe(200);
        expect(body.pagination).toEqual({ current_page: page, rows_per_page: 7, total_rows: want.length, total_pages: pages });
        if (page > pages) expect(body.data).toEqual([]);
        seen.push(...body.data);
      }
      expect(seen.map((row) => row.id)).toEqual(want.map((row) => row.id));
      expect(seen.map(({ id, created_at, user_id, conversation_id, role }) => ({ id, created_at, user_id, conversation_id, role }))).toEqual(want);
    });
  }

  test("ties in created_at exist and are ordered by id", async () => {
    const { body } = await list(alice.key, "rows_per_page=100&sort_by=created_at:asc");
    const ties = body.data.filter((row, i) => i > 0 && row.created_at === body.data[i - 1]!.created_at);
    expect(ties.length).toBeGreaterThan(10);
  });

  test("defaults: 20 newest first, both roles, the key's own user; the seed's example works", async () => {
    const { body } = await list(alice.key, "");
    expect(body.pagination).toEqual({ current_page: 1, rows_per_page: 20, total_rows: expected.get(alice.userId)!.length, total_pages: 9 });
    expect(body.data.map((row) => row.id)).toEqual([...expected.get(alice.userId)!].sort(sorters["created_at:desc"]).slice(0, 20).map((row) => row.id));
    expect(new Set(body.data.map((row) => row.role))).toEqual(new Set(["user", "assistant"]));
    const seed = await list(alice.key, `user_id=:eq:${alice.userId}&rows_per_page=20&current_page=1&sort_by=created_at%3Adesc`);
    expect(seed.body).toEqual(body);
  });

  test("a stored message has the contract's fields", async () => {
    const { body } = await list(alice.key, "rows_per_page=2&sort_by=id:asc");
    expect(body.data[0]).toEqual({
      id: expect.any(Number),
      role: "user",
      content: "message 0",
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      conversation_id: "trip-1",
      user_id: alice.userId,
    } as never);
    expect(body.data[1]).toMatchObject({ role: "assistant", finish_reason: "stop" });
  });

  test("conversation_id filters within the user; :eq: form works", async () => {
    const { body } = await list(alice.key, "conversation_id=:eq:trip-2&rows_per_page=100");
    const want = expected.get(alice.userId)!.filter((row) => row.conversation_id === "trip-2");
    expect(body.pagination.total_rows).toBe(want.length);
    expect(body.data.every((row) => row.conversation_id === "trip-2" && row.user_id === alice.userId)).toBe(true);
    // Bob's trip-1 is his own conversation, never mixed into Alice's trip-1.
    const mine = await list(alice.key, "conversation_id=trip-1&rows_per_page=100");
    expect(mine.body.data.every((row) => row.user_id === alice.userId)).toBe(true);
  });

  test("a user key may not read another user, whether or not that user exists", async () => {
    for (const other of [bob.userId, 999_999]) {
      const { status, body } = await list(alice.key, `user_id=:eq:${other}`);
      expect(status).toBe(403);
      expect(body).toMatchObject({ error: { code: "forbidden", param: "user_id" } });
    }
  });

  test("an admin key reads any user; an unknown user is an empty page", async () => {
    const bobs = await list(admin.key, `user_id=${bob.userId}&rows_per_page=100`);
    expect(bobs.status).toBe(200);
    expect(bobs.body.pagination.total_rows).toBe(expected.get(bob.userId)!.length);
    const nobody = await list(admin.key, "user_id=:eq:424242");
    expect(nobody.status).toBe(200);
    expect(nobody.body).toEqual({ data: [], pagination: { current_page: 1, rows_per_page: 20, total_rows: 0, total_pages: 0 } });
  });

  test("a page far past the end is empty, not an error", async () => {
    const { status, body } = await list(alice.key, "current_page=99999999999999999999");
    expect(status).toBe(200);
    expect(body.data).toEqual([]);
  });
});

describe("listing query plan", () => {
  const plan = (sortField: "created_at" | "id") => {
    const statement = pageStatement(db.storage.db, { userId: alice.userId, sortField, sortDirection: "desc", limit: 20, offset: 40 }).toSQL();
    const rows = db.storage.sqlite.query(`EXPLAIN QUERY PLAN ${statement.sql}`).all(...(statement.params as number[]));
    return (rows as { detail: string }[]).map((row) => row.detail);
  };

  test("a user's messages newest first are read from an index, without a sort step", () => {
    const details = plan("created_at");
    console.log(`EXPLAIN QUERY PLAN (created_at desc): ${details.join(" / ")}`);
    expect(details.some((d) => d.includes("USING INDEX messages_user_created_idx (user_id=?)"))).toBe(true);
    expect(details.join(" ")).not.toContain("TEMP B-TREE");
  });

  test("sorting by id also avoids a sort step", () => {
    expect(plan("id").join(" ")).not.toContain("TEMP B-TREE");
  });
});
