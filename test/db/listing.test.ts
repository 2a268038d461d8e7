import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { pageStatement as pgPageStatement } from "../../src/db/pg/messages";
import type { PgStorage } from "../../src/db/pg/storage";
import { pageStatement } from "../../src/db/sqlite/messages";
import type { CreatedKey } from "../../src/db/types";
import { allowSlowTests, backends, bearer, type OpenedBackend, postgresBackend, type Served, serveApp, testDb } from "../support";

allowSlowTests();

interface Row {
  id: number;
  created_at: string;
  user_id: number;
  conversation_id: string;
  role: string;
}

/** 250 messages over 3 conversations and 2 users; created_at repeats in runs of 3 so ties are common. */
async function seedMessages(opened: OpenedBackend, alice: CreatedKey, bob: CreatedKey): Promise<Map<number, Row[]>> {
  const { storage } = opened;
  const expected = new Map<number, Row[]>();
  const conversations = [
    await storage.conversations.findOrCreate(alice.userId, "trip-1"),
    await storage.conversations.findOrCreate(alice.userId, "trip-2"),
    await storage.conversations.findOrCreate(bob.userId, "trip-1"),
  ];
  const base = Date.parse("2026-11-22T10:00:00.000Z");
  for (let i = 0; i < 250; i++) {
    // Ids grow with i but times are shuffled: order by created_at differs from order by id.
    const conversation = conversations[i % 3]!;
    const createdAt = base + (((i * 37) % 250) - (((i * 37) % 250) % 3)) * 1000;
    const role = i % 2 === 0 ? "user" : "assistant";
    const stored = await storage.conversations.addMessage(conversation, {
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
  return expected;
}

for (const backend of backends()) {
  describe.skipIf(backend.missing !== undefined)(`listing on ${backend.name}`, () => {
    let opened: OpenedBackend;
    let alice: CreatedKey;
    let bob: CreatedKey;
    let admin: CreatedKey;
    let expected: Map<number, Row[]>;
    let server: Served;

    beforeAll(async () => {
      opened = await backend.open("listing");
      const { keys } = opened.storage;
      alice = await keys.create("alice", "user");
      bob = await keys.create("bob", "user");
      admin = await keys.create("root", "admin");
      expected = await seedMessages(opened, alice, bob);
      server = serveApp({ storage: opened.storage });
    });
    afterAll(async () => {
      await server?.stop();
      await opened?.storage.close();
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
        expect(body.data.map((row) => row.id)).toEqual(
          [...expected.get(alice.userId)!]
            .sort(sorters["created_at:desc"])
            .slice(0, 20)
            .map((row) => row.id),
        );
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
  });
}

describe("listing query plan (SQLite)", () => {
  const db = testDb("listing-plan");
  let alice: CreatedKey;
  beforeAll(async () => {
    alice = await db.keys.create("alice", "user");
    await seedMessages({ storage: db.storage, location: db.path, query: async () => [] }, alice, await db.keys.create("bob", "user"));
  });
  afterAll(() => db.storage.close());

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

interface PlanNode {
  "Node Type": string;
  "Index Name"?: string;
  "Scan Direction"?: string;
  Plans?: PlanNode[];
}

const pg = postgresBackend();
describe.skipIf(pg.missing !== undefined)("listing query plan (PostgreSQL)", () => {
  let opened: OpenedBackend;
  let userId: number;
  beforeAll(async () => {
    opened = await pg.open("listing_plan");
    const alice = await opened.storage.keys.create("alice", "user");
    userId = alice.userId;
    const conversation = await opened.storage.conversations.findOrCreate(userId, "long");
    const other = (await opened.storage.keys.create("bob", "user")).userId;
    const otherConversation = await opened.storage.conversations.findOrCreate(other, "other");
    // Enough rows, over two users, that a plan which sorted would have a reason to.
    await opened.query(`INSERT INTO messages (user_id, conversation_id, role, content, created_at)
      SELECT CASE WHEN i % 2 = 0 THEN ${userId} ELSE ${other} END, CASE WHEN i % 2 = 0 THEN ${conversation.id} ELSE ${otherConversation.id} END,
             'user', 'message ' || i, 1795000000000 + (i * 7919) % 20000 * 1000
      FROM generate_series(1, 20000) AS i`);
    await opened.query("VACUUM ANALYZE messages");
  });
  afterAll(() => opened?.storage.close());

  async function plan(sortField: "created_at" | "id"): Promise<PlanNode> {
    const statement = pgPageStatement((opened.storage as PgStorage).db, { userId, sortField, sortDirection: "desc", limit: 20, offset: 400 });
    const client = (opened.storage as PgStorage).db.$client;
    const [row] = await client.unsafe(`EXPLAIN (FORMAT JSON) ${statement.sql}`, statement.params as never[]);
    return (row!["QUERY PLAN"] as { Plan: PlanNode }[])[0]!.Plan;
  }
  const nodes = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodes)];
  const describePlan = (node: PlanNode, depth = 0): string =>
    [
      `${"  ".repeat(depth)}${node["Node Type"]}${node["Index Name"] ? ` using ${node["Index Name"]} (${node["Scan Direction"]})` : ""}`,
      ...(node.Plans ?? []).map((child) => describePlan(child, depth + 1)),
    ].join("\n");

  /** The Limit that picks the page, and whether anything under it sorts: the user's history must not be sorted. */
  function pagePicking(root: PlanNode) {
    const limit = nodes(root).find((node) => node["Node Type"] === "Limit")!;
    return { scans: nodes(limit).filter((node) => node["Index Name"] !== undefined), sorts: nodes(limit).filter((node) => node["Node Type"] === "Sort") };
  }

  test("a user's messages newest first are read from an index backwards, without a sort before the page is cut", async () => {
    const root = await plan("created_at");
    console.log(`EXPLAIN (created_at desc, PostgreSQL):\n${describePlan(root)}`);
    const { scans, sorts } = pagePicking(root);
    expect(scans.map((node) => [node["Index Name"], node["Scan Direction"]])).toEqual([["messages_user_created_idx", "Backward"]]);
    expect(sorts).toEqual([]);
  });

  test("sorting by id also avoids a sort step", async () => {
    // messages_user_idx, or the primary key backwards when the user owns much of the table.
    const { scans, sorts } = pagePicking(await plan("id"));
    expect(scans).toHaveLength(1);
    expect(sorts).toEqual([]);
  });
});
