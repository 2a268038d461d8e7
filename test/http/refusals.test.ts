/**
 * A refused turn stores nothing, whatever refused it: a used-up quota, the rate limit, the cap on
 * open streams, the body limit, a schema no grammar holds. Each is sent as a new conversation's
 * first turn on the native API and as a kept response (alone, and in a conversation) on `/v1`, and
 * the user's conversation list, message list and kept responses are the same after it as before.
 * (An unknown model, which needs a second model, is in models.test.ts.)
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, bearer, type Served, serveApp, testDb, testEngine, until } from "../support";

allowSlowTests();

const db = testDb("refusals");
const alice = await db.keys.create("alice", "user");
let engine: Engine;
/** At most one open stream a key, and bodies of 4 KiB. */
let served: Served;
/** One request a minute a key. */
let limited: Served;

beforeAll(async () => {
  // bench-small never ends a reply by itself: a stream held open stays open.
  engine = await testEngine({ preset: "bench-small", parallel: 2, contextSize: 512 });
  served = serveApp({ storage: db.storage, engine, limits: { maxStreamsPerKey: 1, bodyLimitBytes: 4096, pictureBodyLimitBytes: 4096 } });
  limited = serveApp({ storage: db.storage, engine, limits: { rateLimitPerMinute: 1 } });
});
afterAll(async () => {
  await Promise.all([served.stop(), limited.stop()]);
  await engine.close();
  await db.storage.close();
});

const send = (server: Served, path: string, body: unknown, signal?: AbortSignal) =>
  fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { ...bearer(alice.key), "content-type": "application/json" },
    body: JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });

/** Everything the user can see of what is stored. */
async function stored(): Promise<unknown> {
  const read = async (path: string) => (await fetch(`${served.url}${path}`, { headers: bearer(alice.key) })).json();
  return {
    conversations: await read("/api/v1.0/chat/conversations"),
    messages: await read("/api/v1.0/chat/messages?rows_per_page=100"),
    responses: await db.storage.responses.count(),
  };
}

/** The roles stored in the conversation whose stream is held open. */
async function heldOpen(): Promise<string[]> {
  const response = await fetch(`${served.url}/api/v1.0/chat/messages?conversation_id=held-open`, { headers: bearer(alice.key) });
  return ((await response.json()) as { data: { role: string }[] }).data.map((message) => message.role);
}

let conversation: string;
beforeAll(async () => {
  const response = await send(served, "/v1/conversations", {});
  conversation = ((await response.json()) as { id: string }).id;
});

/** The first turn of a new conversation, natively; a kept response, alone and in a conversation. */
const turns = (extra: Record<string, unknown> = {}, stream = false) =>
  [
    ["/api/v1.0/chat", { message: "Hello", conversation_id: `refused-${crypto.randomUUID()}`, max_tokens: 2, stream, ...extra }],
    ["/v1/responses", { model: "any", input: "Hello", max_output_tokens: 2, stream, ...extra }],
    ["/v1/responses", { model: "any", input: "Hello", conversation, max_output_tokens: 2, stream, ...extra }],
  ] as const;

async function refusedAll(server: Served, status: number, extra?: Record<string, unknown>, stream = false) {
  for (const [path, body] of turns(extra, stream)) {
    const before = await stored();
    const response = await send(server, path, body);
    expect(response.status, `${path} ${await response.clone().text()}`).toBe(path.startsWith("/api/") && status === 400 ? 422 : status);
    await response.text();
    expect(await stored(), path).toEqual(before);
  }
}

describe("a refused turn stores nothing", () => {
  test("a schema no grammar can hold", async () => {
    const schema = { type: "object", properties: { a: { $ref: "#/$defs/a" } }, $defs: { a: { $ref: "#/$defs/a" } } };
    for (const [path, body] of turns()) {
      const before = await stored();
      const format = path.startsWith("/api/")
        ? { response_format: { type: "json_schema", json_schema: { name: "x", schema } } }
        : { text: { format: { type: "json_schema", name: "x", schema } } };
      const response = await send(served, path, { ...body, ...format });
      expect(response.status).toBe(path.startsWith("/api/") ? 422 : 400);
      expect(await stored(), path).toEqual(before);
    }
  });

  test("a body over the limit", async () => {
    await refusedAll(served, 413, { padding: "x".repeat(8192) });
  });

  test("the rate limit", async () => {
    expect((await send(limited, "/api/v1.0/chat", { message: "Hello", conversation_id: "allowed", max_tokens: 1 })).status).toBe(200);
    await refusedAll(limited, 429);
  });

  test("the cap on open streams", async () => {
    const open = new AbortController();
    const holding = await send(served, "/api/v1.0/chat", { message: "Hello", conversation_id: "held-open", max_tokens: 400, stream: true }, open.signal);
    expect(holding.status).toBe(200);
    // Read as it comes: a response nobody reads any more may be collected, and bun then closes
    // its connection, which ends the held turn.
    const read = holding.text().catch(() => "");
    // The held turn writes its question as it starts and its cancelled reply once it ends: the
    // refusals are compared between those writes, and the next test starts after the second.
    await until(async () => (await heldOpen()).includes("user"), "the held turn's question stored");
    try {
      await refusedAll(served, 429, {}, true);
    } finally {
      open.abort();
      await read;
    }
    await until(async () => (await heldOpen()).includes("assistant"), "the held turn's cancelled reply stored");
  });

  test("a used-up quota", async () => {
    await db.storage.quotas.set(alice.userId, { tokens: 1, period: "day" });
    try {
      await refusedAll(served, 429);
    } finally {
      await db.storage.quotas.clear(alice.userId);
    }
  });
});
