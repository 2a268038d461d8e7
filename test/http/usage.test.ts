/**
 * GET /api/v1.0/usage: every reply's tokens, whichever protocol asked for it and streamed or not,
 * added to its user's UTC day, exactly as the replies' `usage` counted them; a user reads only
 * their own, an admin anyone's.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { ChatReply, UsageReport } from "../../src/http/contract";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, bearer, postChat, readSse, type Served, serveApp, testDb, testEngine } from "../support";

allowSlowTests();

const db = testDb("usage-http");
let alice: { key: string; userId: number };
let bob: { key: string; userId: number };
let admin: { key: string; userId: number };
let engine: Engine;
let served: Served;

beforeAll(async () => {
  alice = await db.keys.create("alice", "user");
  bob = await db.keys.create("bob", "user");
  admin = await db.keys.create("root", "admin");
  engine = await testEngine({ parallel: 2 });
  served = serveApp({ storage: db.storage, engine });
});
afterAll(async () => {
  await served.stop();
  await engine.close();
  await db.storage.close();
});

interface Counted {
  prompt_tokens: number;
  completion_tokens: number;
}

async function nativeChat(key: string, message: string): Promise<Counted> {
  const response = await postChat(served.url, key, { message, conversation_id: `c-${message.length}`, temperature: 0, max_tokens: 6 });
  expect(response.status).toBe(200);
  return ((await response.json()) as ChatReply).usage;
}

async function nativeStream(key: string, message: string): Promise<Counted> {
  const response = await postChat(served.url, key, { message, conversation_id: "streamed", temperature: 0, max_tokens: 6, stream: true });
  expect(response.status).toBe(200);
  for await (const { event, data } of readSse(response)) if (event === "done") return (data as ChatReply).usage;
  throw new Error("the stream ended without its done event");
}

async function openAiChat(key: string, message: string): Promise<Counted> {
  const response = await fetch(`${served.url}/v1/chat/completions`, {
    method: "POST",
    headers: { ...bearer(key), "content-type": "application/json" },
    body: JSON.stringify({ model: "any", messages: [{ role: "user", content: message }], max_tokens: 6, temperature: 0 }),
  });
  expect(response.status).toBe(200);
  return ((await response.json()) as { usage: Counted }).usage;
}

const usage = async (key: string, query = "") => fetch(`${served.url}/api/v1.0/usage${query}`, { headers: bearer(key) });

test("every reply's tokens are added to its user's day, as its usage counted them, on every protocol", async () => {
  const counted = await Promise.all([
    nativeChat(alice.key, "hello there"),
    nativeStream(alice.key, "tell me a story"),
    openAiChat(alice.key, "what is the sea"),
    nativeChat(alice.key, "and the hills"),
  ]);
  await nativeChat(bob.key, "bob's own");
  const response = await usage(alice.key);
  expect(response.status).toBe(200);
  const report = (await response.json()) as UsageReport;
  const prompt = counted.reduce((sum, one) => sum + one.prompt_tokens, 0);
  const completion = counted.reduce((sum, one) => sum + one.completion_tokens, 0);
  expect(report).toEqual({
    user_id: alice.userId,
    quota: null,
    days: [{ date: new Date().toISOString().slice(0, 10), prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }],
  });
});

test("a user reads only their own usage; an admin reads anyone's; a malformed user_id is refused", async () => {
  expect((await usage(bob.key, `?user_id=${alice.userId}`)).status).toBe(403);
  const asAdmin = await usage(admin.key, `?user_id=${bob.userId}`);
  expect(asAdmin.status).toBe(200);
  expect(((await asAdmin.json()) as UsageReport).user_id).toBe(bob.userId);
  expect((await usage(admin.key, "?user_id=bob")).status).toBe(422);
  expect((await usage("not-a-key")).status).toBe(401);
});
