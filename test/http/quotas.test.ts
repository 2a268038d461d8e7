/**
 * Token quotas over HTTP: the admin routes; a reply cut where the budget ends, then refusals
 * (429 quota_exceeded, OpenAI's insufficient_quota on /v1) until the period rolls over on an
 * injected clock; exact accounting over every kind of request; concurrent requests of one user
 * that never pass the budget and store nothing when refused.
 */
import { afterAll, beforeAll, expect, spyOn, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { TokenLedger, usageDay } from "../../src/chat/token-ledger";
import type { ChatReply, QuotaEntryJson, QuotaList, UsageReport } from "../../src/http/contract";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, bearer, postChat, readSse, rejection, type Served, serveApp, testDb, testEngine, until, withSeed } from "../support";

allowSlowTests();

const db = testDb("quotas-http");
type User = { key: string; userId: number };
let admin: User;
let engine: Engine;
let served: Served;
/** The ledger's clock: an hour before the day's end, moved on to roll the period over. */
let now = Date.UTC(2026, 10, 26, 23);

beforeAll(async () => {
  admin = await db.keys.create("root", "admin");
  // bench-small never ends a reply by itself: a reply runs to its max_tokens, or its budget.
  engine = await testEngine({ preset: "bench-small", parallel: 2 });
  served = serveApp({ storage: db.storage, engine, ledger: new TokenLedger(db.storage.usage, db.storage.quotas, () => now) });
});
afterAll(async () => {
  await served.stop();
  await engine.close();
  await db.storage.close();
});

const user = (name: string) => db.keys.create(name, "user");

const admitted = (key: string, method: string, path: string, body?: unknown) =>
  fetch(`${served.url}/api/v1.0/admin/quotas${path}`, {
    method,
    headers: { ...bearer(key), ...(body === undefined ? {} : { "content-type": "application/json" }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });

async function setQuota(userId: number | "default", tokens: number, period: "day" | "month" = "day"): Promise<QuotaEntryJson> {
  const response = await admitted(admin.key, "PUT", `/${userId}`, { tokens, period });
  expect(response.status).toBe(200);
  return (await response.json()) as QuotaEntryJson;
}

async function usage(key: string): Promise<UsageReport> {
  const response = await fetch(`${served.url}/api/v1.0/usage`, { headers: bearer(key) });
  expect(response.status).toBe(200);
  return (await response.json()) as UsageReport;
}

const openai = (key: string) => new OpenAI({ apiKey: key, baseURL: `${served.url}/v1`, maxRetries: 0 });

/** The conversation's stored messages: none when the conversation was never stored. */
const storedIn = (userId: number, conversationId: string) =>
  db.storage.sqlite
    .query(
      "SELECT m.role, m.prompt_tokens, m.completion_tokens FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE c.user_id = ? AND c.external_id = ? ORDER BY m.id",
    )
    .all(userId, conversationId) as { role: string; prompt_tokens: number | null; completion_tokens: number | null }[];

test("admin routes set, list and clear quotas; a user key is refused; bad input is named", async () => {
  const bob = await user("bob");
  expect(await setQuota("default", 50_000)).toEqual({
    user_id: null,
    user: null,
    limit: 50_000,
    period: "day",
    used: null,
    remaining: null,
    resets_at: "2026-11-27T00:00:00.000Z",
  });
  expect(await setQuota(bob.userId, 1_000, "month")).toEqual({
    user_id: bob.userId,
    user: "bob",
    limit: 1_000,
    period: "month",
    used: 0,
    remaining: 1_000,
    resets_at: "2026-12-01T00:00:00.000Z",
  });
  const listed = (await (await admitted(admin.key, "GET", "")).json()) as QuotaList;
  expect(listed.data.map((entry) => entry.user_id)).toEqual([null, bob.userId]);
  expect((await usage(bob.key)).quota).toEqual({ limit: 1_000, period: "month", used: 0, remaining: 1_000, resets_at: "2026-12-01T00:00:00.000Z" });

  for (const [method, path] of [
    ["GET", ""],
    ["PUT", `/${bob.userId}`],
    ["DELETE", `/${bob.userId}`],
  ] as const) {
    expect((await admitted(bob.key, method, path, method === "PUT" ? { tokens: 1, period: "day" } : undefined)).status).toBe(403);
  }
  expect((await admitted(admin.key, "PUT", "/999999", { tokens: 1, period: "day" })).status).toBe(404);
  for (const [path, body, param] of [
    ["/bob", { tokens: 1, period: "day" }, "user"],
    [`/${bob.userId}`, { tokens: -1, period: "day" }, "tokens"],
    [`/${bob.userId}`, { tokens: 1, period: "week" }, "period"],
    [`/${bob.userId}`, { tokens: 1.5, period: "day" }, "tokens"],
  ] as const) {
    const response = await admitted(admin.key, "PUT", path, body);
    expect(response.status).toBe(422);
    expect(((await response.json()) as { error: { param: string } }).error.param).toBe(param);
  }

  expect((await admitted(admin.key, "DELETE", `/${bob.userId}`)).status).toBe(204);
  expect((await admitted(admin.key, "DELETE", `/${bob.userId}`)).status).toBe(404);
  expect((await usage(bob.key)).quota?.limit).toBe(50_000);
  expect((await admitted(admin.key, "DELETE", "/default")).status).toBe(204);
  expect((await usage(bob.key)).quota).toBeNull();
  expect(((await (await admitted(admin.key, "GET", "")).json()) as QuotaList).data).toEqual([]);
});

test("with 100 tokens left, a reply asking 500 is cut at the budget; then 429 until the period rolls over", async () => {
  const alice = await user("alice");
  await setQuota(alice.userId, 1_000);
  await db.storage.usage.add(alice.userId, usageDay(now), 900, 0);

  const { data: completion, response } = await openai(alice.key)
    .chat.completions.create({ model: "any", messages: [{ role: "user", content: "Tell me everything" }], max_tokens: 500, temperature: 0 })
    .withResponse();
  expect(completion.choices[0]!.finish_reason).toBe("length");
  expect(completion.usage!.total_tokens).toBe(100);
  expect(Object.fromEntries(["x-quota-limit", "x-quota-remaining", "x-quota-reset"].map((name) => [name, response.headers.get(name)]))).toEqual({
    "x-quota-limit": "1000",
    "x-quota-remaining": "0",
    "x-quota-reset": "3600",
  });
  expect((await usage(alice.key)).quota).toEqual({ limit: 1_000, period: "day", used: 1_000, remaining: 0, resets_at: "2026-11-27T00:00:00.000Z" });

  const refused = await postChat(served.url, alice.key, { message: "one more?", conversation_id: "over" });
  expect(refused.status).toBe(429);
  expect(refused.headers.get("retry-after")).toBe("3600");
  expect(refused.headers.get("x-quota-remaining")).toBe("0");
  expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("quota_exceeded");
  expect(storedIn(alice.userId, "over")).toEqual([]);

  const sdkRefusal = await rejection(openai(alice.key).chat.completions.create({ model: "any", messages: [{ role: "user", content: "hi" }] }));
  expect(sdkRefusal).toBeInstanceOf(OpenAI.RateLimitError);
  expect(sdkRefusal).toMatchObject({ status: 429, type: "insufficient_quota", code: "insufficient_quota" });

  now += 3_600_000;
  const renewed = await postChat(served.url, alice.key, { message: "a new day", conversation_id: "over", max_tokens: 4 });
  expect(renewed.status).toBe(200);
  expect(renewed.headers.get("x-quota-reset")).toBe("86400");
  expect(storedIn(alice.userId, "over").map((row) => row.role)).toEqual(["user", "assistant"]);

  // Totals by role and outcome, no series per user: here two served, two refused.
  const metrics = await (await fetch(`${served.url}/metrics`, { headers: bearer(admin.key) })).text();
  const count = (outcome: string) => Number(new RegExp(`^parley_quota_requests_total\\{role="user",outcome="${outcome}"\\} (\\d+)$`, "m").exec(metrics)?.[1]);
  expect(count("served")).toBeGreaterThanOrEqual(2);
  expect(count("quota_exceeded")).toBeGreaterThanOrEqual(2);
  expect(metrics).not.toContain(`user_id`);
});

test("a quota's used tokens equal the sum of every reply's usage: plain, streamed, cancelled and /v1", async () => {
  const carol = await user("carol");
  await setQuota(carol.userId, 1_000_000);
  const plain = (await (await postChat(served.url, carol.key, { message: "plain", conversation_id: "mix", max_tokens: 5 })).json()) as ChatReply;
  let streamed: ChatReply | undefined;
  for await (const { event, data } of readSse(
    await postChat(served.url, carol.key, { message: "streamed", conversation_id: "mix", max_tokens: 7, stream: true }),
  )) {
    if (event === "done") streamed = data as ChatReply;
  }
  const viaOpenAi = await openai(carol.key).chat.completions.create({ model: "any", messages: [{ role: "user", content: "v1" }], max_tokens: 6 });

  // Cancelled once its reply has begun: what it generated counts, as stored with the reply.
  const leaving = new AbortController();
  const cancelled = await postChat(served.url, carol.key, { message: "cancel me", conversation_id: "left", max_tokens: 400, stream: true }, leaving.signal);
  for await (const { event } of readSse(cancelled)) if (event === "delta") break;
  leaving.abort();
  await until(() => storedIn(carol.userId, "left").length === 2, "the cancelled reply is stored");
  const [, partial] = storedIn(carol.userId, "left");
  expect(partial!.completion_tokens).toBeLessThan(400);

  const expected =
    plain.usage.total_tokens + streamed!.usage.total_tokens + viaOpenAi.usage!.total_tokens + partial!.prompt_tokens! + partial!.completion_tokens!;
  await until(async () => (await usage(carol.key)).quota?.used === expected, `used reaches ${expected}`);
  expect((await usage(carol.key)).quota).toMatchObject({ used: expected, remaining: 1_000_000 - expected });
});

test(
  "20 concurrent requests of one user against a small budget: used stays within it, each refusal is a clean 429 that stored nothing",
  withSeed(async (random) => {
    const dave = await user("dave");
    const limit = 400;
    await setQuota(dave.userId, limit);
    const asks = Array.from({ length: 20 }, (_, i) => ({ conversation: `burst-${i}`, maxTokens: random.int(4, 40), stream: random.int(0, 1) === 1 }));
    const answers = await Promise.all(
      asks.map(async ({ conversation, maxTokens, stream }) => {
        const response = await postChat(served.url, dave.key, {
          message: `question ${conversation}`,
          conversation_id: conversation,
          max_tokens: maxTokens,
          stream,
        });
        if (response.status !== 200)
          return {
            status: response.status,
            code: ((await response.json()) as { error: { code: string } }).error.code,
            conversation,
            retryAfter: response.headers.get("retry-after"),
          };
        if (!stream) return { status: 200, total: ((await response.json()) as ChatReply).usage.total_tokens, conversation };
        for await (const { event, data } of readSse(response))
          if (event === "done") return { status: 200, total: (data as ChatReply).usage.total_tokens, conversation };
        throw new Error("a stream ended without its done event");
      }),
    );
    const served200 = answers.filter((answer) => answer.status === 200);
    const refused = answers.filter((answer) => answer.status !== 200);
    expect(served200.length).toBeGreaterThan(0);
    expect(refused.length).toBeGreaterThan(0);
    for (const refusal of refused) {
      expect(refusal).toMatchObject({ status: 429, code: "quota_exceeded" });
      expect(Number(refusal.retryAfter)).toBeGreaterThan(0);
      expect(storedIn(dave.userId, refusal.conversation)).toEqual([]);
    }
    const report = await usage(dave.key);
    expect(report.quota!.used).toBeLessThanOrEqual(limit);
    expect(report.quota!.used).toBe(served200.reduce((sum, answer) => sum + (answer.total ?? 0), 0));
    expect(report.quota!.remaining).toBe(limit - report.quota!.used);
  }),
);

test("a turn under a quota fits its prompt once: what the quota measured is what the reply evaluates", async () => {
  const dana = await user("dana");
  await setQuota(dana.userId, 1_000_000);
  // Instrumented, not replaced: every fit still runs.
  const fit = spyOn((engine as unknown as { prompts: { fit: (...args: never[]) => unknown } }).prompts, "fit");
  try {
    const fits = async (send: () => Promise<{ total: number }>) => {
      fit.mockClear();
      const { total } = await send();
      expect(total).toBeGreaterThan(0);
      return fit.mock.calls.length;
    };
    const native = async (message: string) => {
      const reply = (await (await postChat(served.url, dana.key, { message, conversation_id: "once", max_tokens: 3 })).json()) as ChatReply;
      return { total: reply.usage.total_tokens };
    };
    await native("opens the conversation");
    expect(await fits(() => native("and goes on"))).toBe(1);
    const stateless = async () => {
      const reply = await openai(dana.key).chat.completions.create({ model: "any", messages: [{ role: "user", content: "once" }], max_tokens: 3 });
      return { total: reply.usage!.total_tokens };
    };
    expect(await fits(stateless)).toBe(1);
  } finally {
    fit.mockRestore();
  }
});

test("Anthropic's Messages API is held to the quota too: a spent one is the SDK's RateLimitError", async () => {
  const frank = await user("frank");
  await setQuota(frank.userId, 1_000);
  const client = new Anthropic({ apiKey: frank.key, baseURL: served.url, maxRetries: 0 });
  const { data: message, response } = await client.messages
    .create({ model: "any", max_tokens: 4, messages: [{ role: "user", content: "hello" }] })
    .withResponse();
  expect(Number(response.headers.get("x-quota-remaining"))).toBe(
    1_000 - message.usage.input_tokens - message.usage.cache_read_input_tokens! - message.usage.output_tokens,
  );
  await db.storage.usage.add(frank.userId, usageDay(now), 1_000, 0);
  const refusal = await rejection(client.messages.create({ model: "any", max_tokens: 4, messages: [{ role: "user", content: "again" }] }));
  expect(refusal).toBeInstanceOf(Anthropic.RateLimitError);
  expect(refusal).toMatchObject({ error: { type: "error", error: { type: "rate_limit_error" } } });
});

test("/v1/responses is held to the quota too, alone and in a conversation: refused before anything is kept, served with the budget's headers", async () => {
  const erin = await user("erin");
  await setQuota(erin.userId, 1_000);
  await db.storage.usage.add(erin.userId, usageDay(now), 1_000, 0);
  const client = openai(erin.key);
  const conversation = await client.conversations.create({});
  const asks = [{}, { conversation: conversation.id }];
  for (const ask of asks) {
    const refusal = await rejection(client.responses.create({ model: "any", input: "hello", max_output_tokens: 4, ...ask }));
    expect(refusal).toMatchObject({ status: 429, type: "insufficient_quota", code: "insufficient_quota" });
  }
  expect((await client.conversations.items.list(conversation.id)).data).toEqual([]);

  await setQuota(erin.userId, 2_000);
  for (const ask of asks) {
    const { data: response, response: raw } = await client.responses.create({ model: "any", input: "hello", max_output_tokens: 4, ...ask }).withResponse();
    expect(response.usage!.output_tokens).toBe(4);
    expect(Number(raw.headers.get("x-quota-remaining"))).toBe((await usage(erin.key)).quota!.remaining);
  }
  expect((await usage(erin.key)).quota!.used).toBeGreaterThan(1_000);
});
