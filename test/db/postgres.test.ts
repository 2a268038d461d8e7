/** What PostgreSQL adds to the storage contract: several processes sharing one database. */
import { afterAll, describe, expect, test } from "bun:test";
import { describeLocation, isPostgresUrl, openStorage } from "../../src/db/open";
import journal from "../../src/db/pg/pg-migrations/meta/_journal.json";
import type { PgStorage } from "../../src/db/pg/storage";
import type { Storage } from "../../src/db/storage";
import { allowSlowTests, freshPostgresDb, postgresMissing, until } from "../support";

allowSlowTests();

const opened: Storage[] = [];
const open = async (url: string) => {
  const storage = await openStorage(url, { poolSize: 2 });
  opened.push(storage);
  return storage;
};
afterAll(async () => {
  await Promise.all(opened.map((storage) => storage.close()));
});

describe("PARLEY_DB forms", () => {
  test("a postgres:// or postgresql:// URL is PostgreSQL, anything else a SQLite path; passwords are not logged", () => {
    expect(isPostgresUrl("postgres://u@h/db")).toBe(true);
    expect(isPostgresUrl("postgresql://u@h/db?host=/run/postgresql")).toBe(true);
    expect(isPostgresUrl("./data/parley.db")).toBe(false);
    expect(isPostgresUrl("/var/lib/postgres.db")).toBe(false);
    expect(describeLocation("postgres://parley:s3cret@db.example/parley")).toBe("postgres://parley:***@db.example/parley");
    expect(describeLocation("postgres://parley@db.example/parley")).toBe("postgres://parley@db.example/parley");
  });
});

describe.skipIf(postgresMissing() !== undefined)("PostgreSQL shared by several processes", () => {
  test("three starts at once on an empty database all come up, migrated once, with one bootstrap admin key", async () => {
    const url = await freshPostgresDb("migrate_race");
    const nodes = await Promise.all([open(url), open(url.replace("postgres://", "postgresql://")), open(url)]);
    const bootstrapped = await Promise.all(nodes.map((node) => node.keys.bootstrap()));
    expect(bootstrapped.filter((key) => key !== undefined)).toHaveLength(1);
    expect(await nodes[2]!.keys.list()).toHaveLength(1);
    const client = (nodes[0] as PgStorage).db.$client;
    const [migrations] = await client`SELECT count(*)::int AS n FROM drizzle.__drizzle_migrations`;
    expect(migrations!.n).toBe(journal.entries.length);
    const [triggers] = await client`SELECT count(*)::int AS n FROM pg_trigger WHERE tgrelid = 'messages'::regclass AND NOT tgisinternal`;
    expect(triggers!.n).toBe(2);
  });

  test("what one node writes the others read; a key revoked on one is refused by the others at once", async () => {
    const url = await freshPostgresDb("shared");
    const [a, b] = [await open(url), await open(url)];
    const { key, id, userId } = await a.keys.create("dana", "user");
    expect(await b.keys.verify(key)).toEqual({ keyId: id, userId, userName: "dana", role: "user" });
    const conversation = await b.conversations.findOrCreate(userId, "c");
    expect((await a.conversations.findOrCreate(userId, "c")).created).toBe(false);
    const first = await a.conversations.addMessage(conversation, { role: "user", content: "one", createdAt: 1_795_000_000_123 });
    expect(first.createdAt).toBe(1_795_000_000_123);
    await b.conversations.addMessage(conversation, { role: "assistant", content: "two", finishReason: "stop" });
    expect(await a.conversations.recentTurns(conversation.id, { maxChars: 1_000 })).toEqual([
      { role: "user", content: "one" },
      { role: "assistant", content: "two" },
    ]);
    expect(await a.keys.revoke(id)).toBe(true);
    expect(await b.keys.verify(key)).toBeUndefined();
    await expect(a.conversations.addMessage({ id: 999_999, userId, externalId: "x" }, { role: "user", content: "orphan" })).rejects.toThrow();
  });

  test("a conversation's lease: one owner at a time, renewable, released, and taken over once it expires", async () => {
    const url = await freshPostgresDb("leases");
    const [a, b] = [await open(url), await open(url)];
    const { userId } = await a.keys.create("erin", "user");
    const { id } = await a.conversations.findOrCreate(userId, "c");
    expect(await a.leases!.lease(id, "node-a", 60_000)).toBe(true);
    expect(await b.leases!.lease(id, "node-b", 60_000)).toBe(false);
    expect(await a.leases!.lease(id, "node-a", 60_000)).toBe(true);
    await b.leases!.release(id, "node-b"); // not the holder: nothing happens
    expect(await b.leases!.lease(id, "node-b", 60_000)).toBe(false);
    await a.leases!.release(id, "node-a");
    expect(await b.leases!.lease(id, "node-b", 200)).toBe(true);
    // node-b "dies": its lease runs out and another node takes it.
    await until(() => a.leases!.lease(id, "node-a", 60_000), "the expired lease to be taken over", 5_000, 50);
  });

  test("libpq's unix-socket URL with an empty host opens the database", async () => {
    const url = new URL(await freshPostgresDb("empty-host"));
    const socketDir = url.searchParams.get("host")!;
    const storage = await open(`postgresql://postgres@${url.pathname}?host=${socketDir}`);
    expect((await storage.keys.list()).length).toBe(0);
  });

  test("rate-limit buckets are shared: two nodes draw from one bucket", async () => {
    const url = await freshPostgresDb("buckets");
    const [a, b] = [await open(url), await open(url)];
    const perMs = 3 / 60_000;
    const taken = [];
    for (const node of [a, b, a, b]) taken.push((await node.buckets!.take(7, 3, perMs)).taken);
    expect(taken).toEqual([true, true, true, false]);
  });

  test("stream slots are shared: two nodes taking a key's last slots at once get exactly the cap; a released or expired slot is free again", async () => {
    const url = await freshPostgresDb("streams");
    const [a, b] = [await open(url), await open(url)];
    const takes = await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2 === 0 ? a : b).streams!.take(3, `holder-${i}`, 3, 60_000)));
    expect(takes.filter(Boolean)).toHaveLength(3);
    // Another key has slots of its own.
    expect(await a.streams!.take(4, "other-key", 3, 60_000)).toBe(true);
    const held = takes.flatMap((taken, i) => (taken ? [`holder-${i}`] : []));
    await b.streams!.release(held[0]!);
    expect(await b.streams!.take(3, "after-release", 3, 60_000)).toBe(true);
    expect(await a.streams!.take(3, "still-full", 3, 60_000)).toBe(false);
    // A holder that stops renewing (its node died) runs out; renewed ones do not.
    expect(await a.streams!.take(5, "dying", 1, 200)).toBe(true);
    expect(await a.streams!.take(5, "kept", 2, 200)).toBe(true);
    await a.streams!.renew(["kept"], 60_000);
    await until(() => b.streams!.take(5, "successor", 2, 60_000), "the dead holder's slot to run out", 5_000, 50);
    expect(await b.streams!.take(5, "one-too-many", 2, 60_000)).toBe(false);
  });
});
