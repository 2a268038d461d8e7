import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, rawRequest, type Served, serveApp, testDb, testEngine, testSeed } from "../support";
import { contractResponse } from "./support";

allowSlowTests();

// Property-based attacks on both endpoints, one request at a time so that every refused request
// can be checked to have changed nothing. The server runs in this process: a prototype polluted
// by a request body would show up here too.
// fast-check names the seed of a failing run; PARLEY_TEST_SEED replays it.
const CASES = 2000;
const DEADLINE_MS = 10_000;

const db = testDb("fuzz");
const alice = await db.keys.create("alice", "user");
const bob = await db.keys.create("bob", "user");
const admin = await db.keys.create("ops", "admin");
let engine: Engine;
let server: Served;

beforeAll(async () => {
  engine = await testEngine({ preset: "demo" });
  server = serveApp({ storage: db.storage, engine });
  // Something to list, and for a stray SQL fragment to destroy.
  for (const conversation_id of ["seed-a", "seed-b"]) {
    const response = await fetch(`${server.url}/api/v1.0/chat`, {
      method: "POST",
      headers: { authorization: `Bearer ${alice.key}`, "content-type": "application/json" },
      body: JSON.stringify({ message: "hello", conversation_id, max_tokens: 2 }),
    });
    expect(response.status).toBe(200);
  }
});
afterAll(async () => {
  await server.stop();
  await engine.close();
  await db.storage.close();
});

const counts = () =>
  db.storage.sqlite
    .query(
      "SELECT (SELECT count(*) FROM messages) AS messages, (SELECT count(*) FROM conversations) AS conversations, " +
        "(SELECT count(*) FROM users) AS users, (SELECT count(*) FROM api_keys WHERE revoked_at IS NULL) AS live_keys",
    )
    .get() as { messages: number; conversations: number; users: number; live_keys: number };

// ---- building blocks -------------------------------------------------------------------------

const NASTY = [
  "",
  " ",
  "\t\n",
  "\u0000",
  "a\u0000b",
  "\ud800",
  "\udfff",
  "x\udc00y",
  "\uffff",
  "\ufeff",
  "\u202e",
  "💥",
  "e\u0301",
  "' OR '1'='1",
  "'; DROP TABLE messages; --",
  "1; DELETE FROM messages",
  "1 UNION SELECT hash FROM api_keys",
  "%' --",
  "../../etc/passwd",
  "..\\..\\windows",
  "/dev/zero",
  "..%2f..%2f",
  "%2e%2e/",
  "__proto__",
  "constructor",
  "prototype",
  "toString",
  "hasOwnProperty",
  "null",
  "true",
  "NaN",
  "Infinity",
  "-Infinity",
  "-0",
  "1e309",
  "0x10",
  "1_000",
  "٣",
  ":eq:",
  ":eq::eq:1",
  ":gt:1",
  ":in:1,2",
  ":eq:-1",
  ":EQ:1",
  "%",
  "%%",
  "%zz",
  "%0",
  "%00",
  "%C3%28",
  "%ED%A0%80",
  "%FF%FE",
  "%F0%9F%92",
  "%25",
  "%2525",
  "+",
  "&",
  "=",
  "?",
  "#",
  "created_at:desc",
  "id:asc",
  "created_at:DESC",
  "created_at",
  "id:asc:desc",
  ":asc",
  "created_at%3Aasc",
];
const nasty = fc.constantFrom(...NASTY);
const anyString = fc.oneof(nasty, fc.string({ maxLength: 40 }), fc.string({ unit: "binary", maxLength: 20 }));
const numberEdge = fc.constantFrom(0, -0, 1, 0.5, 1.5, -1, 4096, 4097, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 53, 2 ** 53 + 2, 1e308, -1e308, 5e-324);
const protoKey = fc.constantFrom("__proto__", "constructor", "prototype");
const anyJson: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  anyString,
  numberEdge,
  fc.double(),
  fc.integer(),
  fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 3 }),
  fc.dictionary(fc.oneof(fc.string({ maxLength: 8 }), protoKey), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
);
/** Mostly-valid values keep a share of cases past validation, down to the database and the model. */
const mostly = <T>(valid: fc.Arbitrary<T>, weight = 6) => fc.oneof({ arbitrary: valid, weight }, { arbitrary: anyJson, weight: 1 });

const safeEncode = (value: string) => {
  try {
    return encodeURIComponent(value);
  } catch {
    return value; // a lone surrogate: sent as-is, the URL parser makes U+FFFD of it
  }
};

// ---- headers ---------------------------------------------------------------------------------

interface Credential {
  header?: string;
  valid: boolean;
}
const credential = fc.oneof(
  {
    weight: 10,
    arbitrary: fc.constantFrom<Credential>(
      { header: `Bearer ${alice.key}`, valid: true },
      { header: `bearer   ${alice.key}`, valid: true },
      { header: `BEARER ${admin.key}`, valid: true },
    ),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom<Credential>(
      { valid: false },
      { header: "Bearer", valid: false },
      { header: `Bearer ${alice.key}x`, valid: false },
      { header: `Bearer ${alice.key} ${alice.key}`, valid: false },
      { header: `Bearer ${alice.key},${bob.key}`, valid: false },
      { header: `Basic ${btoa(`alice:${alice.key}`)}`, valid: false },
      { header: alice.key, valid: false },
      { header: `Bearer ${alice.key.toUpperCase()}`, valid: false },
      { header: "Bearer ' OR 1=1 --", valid: false },
    ),
  },
  { weight: 1, arbitrary: fc.string({ maxLength: 60 }).map((text): Credential => ({ header: `Bearer x${text}`, valid: false })) },
);

/**
 * Extra headers a client might send. Values hold only what RFC 9110 allows in a field value:
 * Bun's HTTP parser itself answers other control characters with a bare 400 before the app
 * runs (see "requests that are not HTTP" below), and fetch refuses NUL, CR and LF outright.
 */
const FIELD_VALUE_ILLEGAL = /[\u0000-\u0008\u000a-\u001f\u007f]/g;
const extraHeaders = fc.array(
  fc.tuple(
    fc.constantFrom(
      "x-request-id",
      "accept",
      "accept-encoding",
      "x-forwarded-for",
      "cookie",
      "origin",
      "x-http-method-override",
      "content-encoding",
      "x-custom",
    ),
    fc.oneof(anyString, fc.string({ unit: "binary-ascii", maxLength: 200 })).map((value) => value.replace(FIELD_VALUE_ILLEGAL, "")),
  ),
  { maxLength: 3 },
);

function headersFor(cred: Credential, extra: [string, string][], contentType?: string): Headers {
  const headers = new Headers();
  for (const [name, value] of extra) {
    try {
      headers.append(name, value);
    } catch {
      // outside Latin-1, so not a legal header value at all: fetch cannot send it
    }
  }
  if (cred.header !== undefined) headers.set("authorization", cred.header);
  if (contentType !== undefined) headers.set("content-type", contentType);
  return headers;
}

// ---- chat bodies -----------------------------------------------------------------------------

const chatObject = fc.record(
  {
    message: mostly(
      fc.oneof(fc.constantFrom("hi", "Hello there", "\u0000", "\ud800 lone", "💥 boom", "' OR 1=1 --"), fc.string({ minLength: 1, maxLength: 30 })),
    ),
    conversation_id: mostly(fc.oneof(fc.constantFrom("fuzz", "seed-a", "a.b_c:d-e"), fc.stringMatching(/^[A-Za-z0-9._-][A-Za-z0-9._:-]{0,20}$/))),
    stream: mostly(fc.boolean()),
    temperature: mostly(fc.double({ min: 0, max: 1, noNaN: true })),
    max_tokens: mostly(fc.integer({ min: 1, max: 3 })),
    seed: mostly(fc.integer({ min: 0, max: 2 ** 32 - 1 })),
    user_id: anyJson,
  },
  { requiredKeys: [] },
);

const deep = (depth: number) => `${"[".repeat(depth)}${"]".repeat(depth)}`;
const RAW_BODIES = [
  "",
  "null",
  "[]",
  '"just a string"',
  "{",
  '{"message":"hi","conversation_id":"c",}',
  '{"message":"hi","conversation_id":"c","temperature":NaN}',
  '{"message":"hi","conversation_id":"c","temperature":Infinity}',
  '{"message":"hi","conversation_id":"c","temperature":-Infinity}',
  '{"message":"hi","conversation_id":"c","max_tokens":1e999}',
  '{"message":"hi","conversation_id":"c","max_tokens":2.0}',
  '{"message":"hi","conversation_id":"c","seed":-0}',
  '{"message":"hi","conversation_id":"c","seed":18446744073709551616}',
  '{"message":"hi","conversation_id":"c","max_tokens":0x10}',
  "{'message':'hi','conversation_id':'c'}",
  '{"message":"hi","message":{"x":1},"conversation_id":"c"}',
  '{"__proto__":{"stream":true,"max_tokens":4096,"admin":true},"message":"hi","conversation_id":"proto","max_tokens":2}',
  '{"constructor":{"prototype":{"polluted":1}},"message":"hi","conversation_id":"proto","max_tokens":2}',
  '{"message":"\\ud800","conversation_id":"lone","max_tokens":2}',
  '{"message":"\\u0000","conversation_id":"nul","max_tokens":2}',
  '{"message":"hi\\u0000there","conversation_id":"nul","max_tokens":2}',
  `{"message":${deep(10_000)},"conversation_id":"deep"}`,
  `${'{"a":'.repeat(10_000)}1${"}".repeat(10_000)}`,
  deep(10_000),
  `{"message":"${"x".repeat(70_000)}","conversation_id":"big"}`,
  '{"message":"hi","conversation_id":"c"}\u0000',
  '\ufeff{"message":"hi","conversation_id":"bom","max_tokens":2}',
];
const INVALID_UTF8 = [
  [0xff],
  [0x7b, 0x22, 0x6d, 0x22, 0x3a, 0x22, 0xc3, 0x28, 0x22, 0x7d], // {"m":"\xc3(" }
  [0xed, 0xa0, 0x80], // a surrogate encoded as UTF-8 (CESU)
  [0xc0, 0xaf], // overlong "/"
  [0xf8, 0x88, 0x80, 0x80, 0x80],
  [0xfe, 0xff, 0x00, 0x7b, 0x00, 0x7d], // UTF-16 with a BOM
].map((bytes) => new Uint8Array(bytes));

const CONTENT_TYPES = [
  "application/json",
  "application/json; charset=utf-8",
  "application/json;charset=UTF-8",
  'application/json; charset="utf-8"',
  "application/json; charset=latin1",
  "application/json; charset=utf-16",
  "APPLICATION/JSON",
  "text/plain",
  "application/x-www-form-urlencoded",
  "multipart/form-data; boundary=x",
  "application/jsonx",
  "application/json, text/plain",
  "",
  "*/*",
];

const chatBody = fc.oneof(
  { weight: 6, arbitrary: chatObject.map((object) => JSON.stringify(object) as string | Uint8Array) },
  { weight: 2, arbitrary: anyJson.map((value) => JSON.stringify(value) ?? "") },
  { weight: 2, arbitrary: fc.constantFrom<string | Uint8Array>(...RAW_BODIES, ...INVALID_UTF8) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }) },
  { weight: 1, arbitrary: fc.string({ maxLength: 64 }) },
);
const contentType = fc.oneof(
  { weight: 8, arbitrary: fc.constant("application/json") },
  { weight: 2, arbitrary: fc.option(fc.constantFrom(...CONTENT_TYPES), { nil: undefined }) },
);

// ---- paths -----------------------------------------------------------------------------------

const pathVariant = (path: string) =>
  fc.oneof(
    { weight: 12, arbitrary: fc.constant({ path, exact: true }) },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom("/", "/..", "/%2e%2e", "/..%2f..%2fetc%2fpasswd", "%00", "%2F", "/.", "//", "/%20", ";x", "/index.html", "/../messages", "%3Fx")
        .map((suffix) => ({ path: `${path}${suffix}`, exact: false })),
    },
  );

// ---- one request -----------------------------------------------------------------------------

interface Outcome {
  status: number;
  body: unknown;
}

/** Sends one request with a deadline and checks the invariants every response must keep. */
async function attempt(url: string, init: RequestInit): Promise<Outcome> {
  const before = counts();
  let response: Response;
  try {
    response = await fetch(url, { ...init, signal: AbortSignal.timeout(DEADLINE_MS) });
  } catch (error) {
    throw new Error(`no response within ${DEADLINE_MS} ms (or the connection failed): ${String(error)}`);
  }
  const outcome = await contractResponse(response);
  expect(outcome.status).not.toBe(500);
  if (outcome.status >= 300) expect(counts()).toEqual(before);
  return outcome;
}

const stats = { chat: 0, list: 0, chatStatuses: new Map<number, number>(), listStatuses: new Map<number, number>() };
const tally = (map: Map<number, number>, status: number) => map.set(status, (map.get(status) ?? 0) + 1);

async function healthy() {
  const response = await fetch(`${server.url}/healthz`, { signal: AbortSignal.timeout(DEADLINE_MS) });
  expect(response.status).toBe(200);
}

describe("fuzzing", () => {
  test(`POST /api/v1.0/chat: ${CASES} random and adversarial requests`, async () => {
    await fc.assert(
      fc.asyncProperty(chatBody, contentType, credential, extraHeaders, pathVariant("/api/v1.0/chat"), async (body, type, cred, extra, target) => {
        stats.chat++;
        const before = counts();
        const outcome = await attempt(`${server.url}${target.path}`, { method: "POST", headers: headersFor(cred, extra, type), body });
        tally(stats.chatStatuses, outcome.status);
        if (!target.exact) return;
        expect([200, 400, 401, 413, 415, 422]).toContain(outcome.status);
        // 401 exactly when the credential is bad: it is checked before anything else.
        expect(outcome.status === 401).toBe(!cred.valid);
        if (outcome.status === 200) {
          // One stored turn: the user's message and the reply, and nothing else.
          expect(counts().messages).toBe(before.messages + 2);
        }
        if (stats.chat % 250 === 0) await healthy();
      }),
      { numRuns: CASES, seed: testSeed },
    );
    await healthy();
  }, 120_000);

  const LISTING_PARAMS = ["user_id", "conversation_id", "rows_per_page", "current_page", "sort_by"];
  const listingValue = fc.oneof(
    fc.constantFrom(
      `${alice.userId}`,
      `:eq:${alice.userId}`,
      `${bob.userId}`,
      `:eq:${bob.userId}`,
      "999999",
      "0",
      "00",
      "-1",
      "1.0",
      "1e2",
      "9007199254740993",
      "99999999999999999999999",
    ),
    fc.constantFrom("seed-a", ":eq:seed-a", "fuzz", "1", "20", "100", "101", "created_at:asc", "id:desc", "created_at%3Adesc", "id%3aasc"),
    nasty,
    fc.string({ maxLength: 30 }),
    fc.integer().map(String),
    fc.double().map(String),
  );
  const queryString = fc
    .array(
      fc.tuple(
        fc.oneof(
          { weight: 6, arbitrary: fc.constantFrom(...LISTING_PARAMS) },
          { weight: 1, arbitrary: fc.constantFrom("access_token", "__proto__", "constructor", "user_id[]", "sort_by[field]", "", "unknown", "%75ser_id") },
        ),
        listingValue,
        fc.boolean(),
      ),
      { maxLength: 6 },
    )
    .map((pairs) => ({
      text: pairs.map(([name, value, encode]) => `${name}=${encode ? safeEncode(value) : value}`).join("&"),
      onlyUnknown: pairs.length > 0 && pairs.every(([name]) => ["access_token", "unknown"].includes(name)),
    }));

  test(`GET /api/v1.0/chat/messages: ${CASES} random and adversarial query strings`, async () => {
    await fc.assert(
      fc.asyncProperty(queryString, credential, extraHeaders, pathVariant("/api/v1.0/chat/messages"), async (query, cred, extra, target) => {
        stats.list++;
        const outcome = await attempt(`${server.url}${target.path}?${query.text}`, { headers: headersFor(cred, extra) });
        tally(stats.listStatuses, outcome.status);
        if (!target.exact) return;
        expect([200, 401, 403, 422]).toContain(outcome.status);
        expect(outcome.status === 401).toBe(!cred.valid);
        // Unknown query parameters are ignored.
        if (query.onlyUnknown && cred.valid) expect(outcome.status).toBe(200);
        if (outcome.status === 200) {
          const page = JSON.parse(outcome.body as string) as { data: { user_id: number }[] };
          // A user key sees only its own user's rows, whatever the query said.
          if (cred.header?.includes(alice.key)) expect(page.data.every((row) => row.user_id === alice.userId)).toBe(true);
        }
        if (stats.list % 250 === 0) await healthy();
      }),
      { numRuns: CASES, seed: testSeed },
    );
    await healthy();
  }, 120_000);

  test("every hand-written hostile body, each sent once with a valid key", async () => {
    const accepted: string[] = [];
    for (const body of [...RAW_BODIES, ...INVALID_UTF8]) {
      const before = counts();
      const outcome = await attempt(`${server.url}/api/v1.0/chat`, {
        method: "POST",
        headers: headersFor({ header: `Bearer ${alice.key}`, valid: true }, [], "application/json"),
        body,
      });
      const label = typeof body === "string" ? body.slice(0, 60) : `bytes ${[...body].join(",")}`;
      expect([200, 400, 413, 422], label).toContain(outcome.status);
      if (outcome.status !== 200) continue;
      expect(counts().messages, label).toBe(before.messages + 2);
      const text = outcome.body as string;
      // A streamed reply carries it in its start event.
      const json = text.startsWith("event:") ? /^event: start\ndata: (.*)$/m.exec(text)![1]! : text;
      const { user_message } = JSON.parse(json) as { user_message: { id: number; content: string } };
      const row = db.storage.sqlite.query("SELECT content FROM messages WHERE id = ?").get(user_message.id) as { content: string } | null;
      expect(row?.content, label).toBe(user_message.content);
      accepted.push(label);
    }
    // A copy by assignment (as validation may make) would turn a `__proto__` member into the
    // body's prototype, its members read as the body's own: such a body is refused naming it, so
    // nothing is smuggled past the schema, and no prototype changes (checked at the end).
    const smuggled = await attempt(`${server.url}/api/v1.0/chat`, {
      method: "POST",
      headers: headersFor({ header: `Bearer ${alice.key}`, valid: true }, [], "application/json"),
      body: '{"__proto__":{"max_tokens":99999},"message":"hi","conversation_id":"proto"}',
    });
    expect(smuggled.status).toBe(422);
    expect((smuggled.body as { error: { param: string } }).error.param).toBe("__proto__");
    // NUL bytes are text like any other: stored, not refused or dropped. A lone surrogate is not
    // text (UTF-8 storage would turn it into U+FFFD): refused.
    for (const body of ['{"message":"\\u0000"', '{"message":"hi\\u0000there"']) {
      expect(
        accepted.some((label) => label.startsWith(body)),
        body,
      ).toBe(true);
    }
    expect(accepted.some((label) => label.startsWith('{"message":"\\ud800"'))).toBe(false);
  });

  test("requests that are not HTTP, or that fetch would normalise: a contract answer or the parser's bare refusal, never a 500", async () => {
    const auth = `Authorization: Bearer ${alice.key}\r\n`;
    const requests: (string | Uint8Array)[] = [
      `GET /api/v1.0/chat/../chat/messages HTTP/1.1\r\nHost: x\r\n${auth}Connection: close\r\n\r\n`,
      `GET /api/v1.0/chat/messages/../../../../etc/passwd HTTP/1.1\r\nHost: x\r\n${auth}Connection: close\r\n\r\n`,
      `GET /api/v1.0/chat/%2e%2e/chat/messages HTTP/1.1\r\nHost: x\r\n${auth}Connection: close\r\n\r\n`,
      `GET /api/v1.0/chat/messages%00 HTTP/1.1\r\nHost: x\r\n${auth}Connection: close\r\n\r\n`,
      Buffer.from(`GET /api/v1.0/chat/messages?conversation_id=\xff\xfe&sort_by=\xc3(:asc HTTP/1.1\r\nHost: x\r\n${auth}Connection: close\r\n\r\n`, "latin1"),
      `GET /api/v1.0/chat/messages HTTP/1.1\r\nHost: x\r\n${auth}X-Custom: a\u0001b\r\nConnection: close\r\n\r\n`,
      `GET /api/v1.0/chat/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${alice.key}\u0000\r\nConnection: close\r\n\r\n`,
      `POST /api/v1.0/chat HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n`,
      `POST /api/v1.0/chat HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Length: -1\r\nConnection: close\r\n\r\n`,
      `POST /api/v1.0/chat HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Length: 99999999999\r\nConnection: close\r\n\r\n{}`,
      `POST /api/v1.0/chat HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${`10000\r\n${"x".repeat(65_536)}\r\n`}${`10000\r\n${"x".repeat(65_536)}\r\n`}0\r\n\r\n`,
      `GET /api/v1.0/chat/messages HTTP/1.1\r\nHost: x\r\n${auth}Cookie: ${"c".repeat(100_000)}\r\nConnection: close\r\n\r\n`,
      "GARBAGE\r\n\r\n",
      // Hosts that are not hosts (RFC 9112: a 400), on every kind of route.
      ...["a b", "", "exa mple.com", "a/b", "user@host"].map((host) => `GET /healthz HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`),
      `GET /api/v1.0/chat/messages HTTP/1.1\r\nHost: a b\r\n${auth}Connection: close\r\n\r\n`,
      `POST /api/v1.0/chat HTTP/1.1\r\nHost: a b\r\n${auth}Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`,
    ];
    const before = counts();
    for (const request of requests) {
      const label = (typeof request === "string" ? request : new TextDecoder().decode(request)).slice(0, 80);
      const response = await rawRequest(server.url, request);
      expect(response, label).toBeDefined();
      expect(response!.status, label).not.toBe(500);
      if (response!.body === "") {
        // Bun's HTTP parser refused it before the app ran: a bare status, and the connection closes.
        expect([400, 431, 505], `${label}\n${response!.head}`).toContain(response!.status);
      } else {
        await contractResponse(new Response(response!.body, { status: response!.status }));
      }
    }
    expect(counts()).toEqual(before);
    await healthy();
  });

  test("no request body polluted a prototype, and every key still works", async () => {
    const probe: Record<string, unknown> = {};
    for (const key of ["stream", "max_tokens", "admin", "polluted", "role", "userId"]) expect(probe[key]).toBeUndefined();
    expect(counts().live_keys).toBe(3);
    console.log(
      `fuzz: chat ${stats.chat} cases ${JSON.stringify(Object.fromEntries(stats.chatStatuses))}; ` +
        `listing ${stats.list} cases ${JSON.stringify(Object.fromEntries(stats.listStatuses))}`,
    );
    expect(stats.chat).toBeGreaterThanOrEqual(CASES);
    expect(stats.list).toBeGreaterThanOrEqual(CASES);
  });
});
