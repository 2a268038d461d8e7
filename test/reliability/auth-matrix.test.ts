import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, bearer, postChat, type Served, serveApp, testDb, testEngine } from "../support";
import { contractResponse } from "./support";

allowSlowTests();

const db = testDb("auth-matrix");
const alice = await db.keys.create("alice", "user");
const bob = await db.keys.create("bob", "user");
const admin = await db.keys.create("ops", "admin");
const revoked = await db.keys.create("alice", "user");
await db.keys.revoke(revoked.id);
let engine: Engine;
let server: Served;

beforeAll(async () => {
  engine = await testEngine({ preset: "demo" });
  server = serveApp({ storage: db.storage, engine });
});
afterAll(async () => {
  await server.stop();
  await engine.close();
  await db.storage.close();
});

type Endpoint = "chat" | "list own" | "list other" | "metrics";
type Credential = "none" | "malformed" | "wrong scheme" | "unknown" | "known prefix" | "revoked" | "user" | "admin";

const authorization: Record<Credential, string | undefined> = {
  none: undefined,
  malformed: `Bearer ${alice.key} extra`,
  "wrong scheme": `Basic ${btoa(`alice:${alice.key}`)}`,
  unknown: "Bearer pk_0000000000000000000000000000000000000000000",
  // A real key with its last character changed: right up to the end, still unknown.
  "known prefix": `Bearer ${alice.key.slice(0, -1)}${alice.key.endsWith("A") ? "B" : "A"}`,
  revoked: `Bearer ${revoked.key}`,
  user: `Bearer ${alice.key}`,
  admin: `Bearer ${admin.key}`,
};

function send(endpoint: Endpoint, credential: Credential, conversation = "matrix"): Promise<Response> {
  const headers: Record<string, string> = {};
  const header = authorization[credential];
  if (header !== undefined) headers.authorization = header;
  switch (endpoint) {
    case "chat":
      return fetch(`${server.url}/api/v1.0/chat`, {
        method: "POST",
        headers: { ...headers, "content-type": "application/json" },
        body: JSON.stringify({ message: "Hello", conversation_id: conversation, max_tokens: 4 }),
      });
    case "list own":
      return fetch(`${server.url}/api/v1.0/chat/messages`, { headers });
    case "list other":
      return fetch(`${server.url}/api/v1.0/chat/messages?user_id=${bob.userId}`, { headers });
    case "metrics":
      return fetch(`${server.url}/metrics`, { headers });
  }
}

// The contract: 401 for every credential that does not name a live key, whatever the endpoint;
// then a user key reads only its own user and never the metrics; an admin key reads everything.
const expected: Record<Credential, Record<Endpoint, number>> = {
  none: { chat: 401, "list own": 401, "list other": 401, metrics: 401 },
  malformed: { chat: 401, "list own": 401, "list other": 401, metrics: 401 },
  "wrong scheme": { chat: 401, "list own": 401, "list other": 401, metrics: 401 },
  unknown: { chat: 401, "list own": 401, "list other": 401, metrics: 401 },
  "known prefix": { chat: 401, "list own": 401, "list other": 401, metrics: 401 },
  revoked: { chat: 401, "list own": 401, "list other": 401, metrics: 401 },
  user: { chat: 200, "list own": 200, "list other": 403, metrics: 403 },
  admin: { chat: 200, "list own": 200, "list other": 200, metrics: 200 },
};

// RFC 6750: `error="invalid_token"` only when a bearer token was actually presented.
const tokenSent: Record<Credential, boolean> = {
  none: false,
  malformed: true,
  "wrong scheme": false,
  unknown: true,
  "known prefix": true,
  revoked: true,
  user: true,
  admin: true,
};

describe("authorization matrix", () => {
  for (const [credential, row] of Object.entries(expected) as [Credential, Record<Endpoint, number>][]) {
    for (const [endpoint, status] of Object.entries(row) as [Endpoint, number][]) {
      test(`${endpoint} with ${credential} key → ${status}`, async () => {
        const response = await send(endpoint, credential);
        const result = await contractResponse(response);
        expect(result.status).toBe(status);
        if (status === 401) {
          expect(response.headers.get("www-authenticate")).toBe(
            tokenSent[credential] ? 'Bearer realm="parley", error="invalid_token"' : 'Bearer realm="parley"',
          );
        }
      });
    }
  }

  test("a refused key leaves no trace in the database", () => {
    const rows = db.storage.sqlite.query("SELECT DISTINCT user_id FROM messages").all() as { user_id: number }[];
    // Only the two live keys' chats (alice's user key, the admin's) stored anything.
    expect(rows.map((row) => row.user_id).sort()).toEqual([alice.userId, admin.userId].sort());
  });
});

interface Message {
  id: number;
  user_id: number;
  conversation_id: string;
  content: string;
  role: string;
}

describe("conversations belong to their user", () => {
  const aliceChat = (body: Record<string, unknown>) => postChat(server.url, alice.key, { temperature: 0, max_tokens: 8, ...body });
  const bobChat = (body: Record<string, unknown>) => postChat(server.url, bob.key, { temperature: 0, seed: 7, max_tokens: 8, ...body });
  const aliceRows = () => db.storage.sqlite.query("SELECT id, user_id, content FROM messages WHERE user_id = ? ORDER BY id").all(alice.userId);

  test("whatever conversation id or user id bob sends, he never reads, continues or shapes alice's conversation", async () => {
    for (const message of ["My secret is 4711", "Remember it"]) {
      expect((await aliceChat({ message, conversation_id: "secret" })).status).toBe(200);
    }
    const before = aliceRows();

    // Bob's reply in "secret" is exactly his reply in a conversation with no history at all.
    const inSecret = await bobChat({ message: "What is my secret?", conversation_id: "secret", user_id: alice.userId });
    const inFresh = await bobChat({ message: "What is my secret?", conversation_id: "bob-fresh" });
    const [secret, fresh] = (await Promise.all([inSecret.json(), inFresh.json()])) as {
      new_conversation: boolean;
      message: Message;
      usage: { prompt_tokens: number };
    }[];
    expect(secret!.new_conversation).toBe(true);
    expect(secret!.message.user_id).toBe(bob.userId);
    expect(secret!.message.content).toBe(fresh!.message.content);
    expect(secret!.usage.prompt_tokens).toBe(fresh!.usage.prompt_tokens);

    // Ids that are not the plain one are refused, not mapped to alice's conversation.
    for (const conversation_id of [":eq:secret", "secret/../secret", "secret\u0000", `${alice.userId}:secret`, " secret"]) {
      const response = await bobChat({ message: "hi", conversation_id });
      const { status } = await contractResponse(response);
      expect([200, 422]).toContain(status);
    }

    const attempts = [
      `user_id=${alice.userId}`,
      `user_id=:eq:${alice.userId}`,
      `user_id=%3Aeq%3A${alice.userId}`,
      `user_id=0${alice.userId}`,
      `user_id=${alice.userId}.0`,
      `user_id=${alice.userId}&user_id=${bob.userId}`,
      `user_id=${bob.userId}&user_id=${alice.userId}`,
      `user_id[]=${alice.userId}`,
      `user_id=${bob.userId}%20OR%201=1`,
      "conversation_id=secret",
      "conversation_id=:eq:secret",
      `conversation_id=secret&user_id=${alice.userId}`,
      "conversation_id=secret' OR '1'='1",
      "rows_per_page=100",
    ];
    for (const query of attempts) {
      const response = await fetch(`${server.url}/api/v1.0/chat/messages?${query}`, { headers: bearer(bob.key) });
      const { status, body } = await contractResponse(response);
      expect([200, 403, 422]).toContain(status);
      if (status === 200) {
        const { data } = JSON.parse(body as string) as { data: Message[] };
        expect(data.every((row) => row.user_id === bob.userId)).toBe(true);
      }
    }

    // Alice's conversation is exactly as she left it, and her listing shows none of bob's turns.
    expect(aliceRows()).toEqual(before);
    const listed = (await (await fetch(`${server.url}/api/v1.0/chat/messages?conversation_id=secret`, { headers: bearer(alice.key) })).json()) as {
      data: Message[];
    };
    expect(listed.data.map((row) => row.user_id)).toEqual([alice.userId, alice.userId, alice.userId, alice.userId]);

    // Her next turn continues her own history (four stored messages), not bob's.
    const next = (await (await aliceChat({ message: "And now?", conversation_id: "secret" })).json()) as { new_conversation: boolean };
    expect(next.new_conversation).toBe(false);
  });

  test("an admin may read alice's conversation; bob's key still may not", async () => {
    const asAdmin = await fetch(`${server.url}/api/v1.0/chat/messages?user_id=:eq:${alice.userId}&conversation_id=secret`, { headers: bearer(admin.key) });
    expect(asAdmin.status).toBe(200);
    expect(((await asAdmin.json()) as { data: Message[] }).data.length).toBe(6);
    expect((await fetch(`${server.url}/api/v1.0/chat/messages?user_id=:eq:${alice.userId}`, { headers: bearer(bob.key) })).status).toBe(403);
  });
});
