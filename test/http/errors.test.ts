import { afterAll, describe, expect, test } from "bun:test";
import { toDomainError, wireError } from "../../src/http/errors";
import { allowSlowTests, bearer, serveApp, testDb } from "../support";

allowSlowTests();

const db = testDb("errors");
const { key } = await db.keys.create("alice", "user");
const server = serveApp({ storage: db.storage });
afterAll(async () => {
  await server.stop();
  await db.storage.close();
});

const MARK = "ZZ-SECRET-INPUT-7731";

async function call(path: string, init: RequestInit = {}) {
  const response = await fetch(server.url + path, init);
  const text = await response.text();
  return { response, text, body: JSON.parse(text) as { error: { code: string; param?: string; message: string; request_id: string } } };
}

const postChat = (body: RequestInit["body"], headers: Record<string, string> = { "content-type": "application/json" }) =>
  call("/api/v1.0/chat", { method: "POST", body, headers: { ...bearer(key), ...headers } });

function expectError(result: Awaited<ReturnType<typeof call>>, status: number, code: string, param?: string) {
  expect(result.response.status).toBe(status);
  expect(result.response.headers.get("content-type")).toBe("application/json; charset=utf-8");
  expect(result.body.error.code).toBe(code);
  expect(result.body.error.param).toBe(param as string);
  expect(result.body.error.request_id).toBe(result.response.headers.get("x-request-id")!);
  expect(result.text).not.toContain(MARK);
  expect(result.text).not.toContain('"found"');
}

describe("the contract's error table", () => {
  test("400 invalid_json: malformed JSON and invalid UTF-8", async () => {
    expectError(await postChat(`{"message": "${MARK}"`), 400, "invalid_json");
    expectError(await postChat(new Uint8Array([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d])), 400, "invalid_json");
    expectError(await postChat(""), 400, "invalid_json");
  });

  test("404 not_found for an unknown path, with or without a key", async () => {
    expectError(await call(`/api/v1.0/${MARK}`, { headers: bearer(key) }), 404, "not_found");
    expectError(await call("/nowhere"), 404, "not_found");
  });

  test("405 method_not_allowed with Allow on a known path", async () => {
    const chat = await call("/api/v1.0/chat", { method: "GET", headers: bearer(key) });
    expectError(chat, 405, "method_not_allowed");
    expect(chat.response.headers.get("allow")).toBe("POST, OPTIONS");
    const list = await call("/api/v1.0/chat/messages", { method: "DELETE", headers: bearer(key) });
    expectError(list, 405, "method_not_allowed");
    expect(list.response.headers.get("allow")).toBe("GET, HEAD, OPTIONS");
  });

  test("413 payload_too_large: declared and chunked bodies over the limit", async () => {
    const big = JSON.stringify({ message: MARK.repeat(4000), conversation_id: "c" });
    expectError(await postChat(big), 413, "payload_too_large");
    const chunks = new ReadableStream({
      start(controller) {
        for (let i = 0; i < 100; i++) controller.enqueue(new TextEncoder().encode(MARK.repeat(50)));
        controller.close();
      },
    });
    expectError(await postChat(chunks), 413, "payload_too_large");
  });

  test("415 unsupported_media_type: not JSON, no type, or not UTF-8", async () => {
    const body = JSON.stringify({ message: MARK, conversation_id: "c" });
    expectError(await postChat(body, { "content-type": "text/plain" }), 415, "unsupported_media_type");
    expectError(await postChat(body, { "content-type": "application/x-www-form-urlencoded" }), 415, "unsupported_media_type");
    expectError(await postChat(body, { "content-type": "application/json; charset=latin1" }), 415, "unsupported_media_type");
    expectError(await postChat(body, {}), 415, "unsupported_media_type");
  });

  const invalid: [string, Record<string, unknown> | unknown[] | string, string][] = [
    ["message missing", { conversation_id: "c" }, "message"],
    ["message empty", { message: "", conversation_id: "c" }, "message"],
    ["message only whitespace", { message: " \n\t ", conversation_id: "c" }, "message"],
    ["message over 16000 code points", { message: "é".repeat(16_001), conversation_id: "c" }, "message"],
    ["message emoji over 16000 code points", { message: "😀".repeat(16_001), conversation_id: "c" }, "message"],
    ["message not a string", { message: { text: MARK }, conversation_id: "c" }, "message"],
    // JSON.stringify writes these as `\ud800` escapes: what a client's JSON may carry.
    ["message with a lone high surrogate", { message: "x\ud800y", conversation_id: "c" }, "message"],
    ["message with a lone low surrogate", { message: "\udc00", conversation_id: "c" }, "message"],
    ["conversation_id missing", { message: MARK }, "conversation_id"],
    ["conversation_id with a space", { message: "hi", conversation_id: `a ${MARK}` }, "conversation_id"],
    ["conversation_id starting with :", { message: "hi", conversation_id: ":eq:x" }, "conversation_id"],
    ["conversation_id too long", { message: "hi", conversation_id: "x".repeat(129) }, "conversation_id"],
    ["conversation_id a number", { message: "hi", conversation_id: 42 }, "conversation_id"],
    ["stream as a string", { message: "hi", conversation_id: "c", stream: "true" }, "stream"],
    ["temperature above 1", { message: "hi", conversation_id: "c", temperature: 1.5 }, "temperature"],
    ["temperature below 0", { message: "hi", conversation_id: "c", temperature: -0.1 }, "temperature"],
    ["temperature a word", { message: "hi", conversation_id: "c", temperature: "hot" }, "temperature"],
    ["temperature a numeric string", { message: "hi", conversation_id: "c", temperature: "0.5" }, "temperature"],
    ["max_tokens 0", { message: "hi", conversation_id: "c", max_tokens: 0 }, "max_tokens"],
    ["max_tokens over 4096", { message: "hi", conversation_id: "c", max_tokens: 4097 }, "max_tokens"],
    ["max_tokens fractional", { message: "hi", conversation_id: "c", max_tokens: 1.5 }, "max_tokens"],
    ["seed negative", { message: "hi", conversation_id: "c", seed: -1 }, "seed"],
    ["seed over 2^32-1", { message: "hi", conversation_id: "c", seed: 2 ** 32 }, "seed"],
  ];
  for (const [name, body, param] of invalid) {
    test(`422 invalid_request: ${name}`, async () => {
      expectError(await postChat(JSON.stringify(body)), 422, "invalid_request", param);
    });
  }

  test("422 for a body that is not an object", async () => {
    for (const body of [[MARK], `"${MARK}"`, "null", "42"]) {
      const result = await postChat(typeof body === "string" ? body : JSON.stringify(body));
      expect(result.response.status).toBe(422);
      expect(result.body.error.code).toBe("invalid_request");
      expect(result.text).not.toContain(MARK);
    }
  });

  test("temperature 0 and 1 and unknown fields are accepted (then 503: no model in this app)", async () => {
    for (const temperature of [0, 1]) {
      const result = await postChat(JSON.stringify({ message: "hi", conversation_id: "c", temperature, unknown_field: MARK }));
      expectError(result, 503, "overloaded");
      expect(Number(result.response.headers.get("retry-after"))).toBeGreaterThan(0);
    }
  });

  const badQueries: [string, string][] = [
    ["user_id=:gt:1", "user_id"],
    [`user_id=${MARK}`, "user_id"],
    ["user_id=:in:1,2", "user_id"],
    ["conversation_id=:like:x", "conversation_id"],
    ["rows_per_page=0", "rows_per_page"],
    ["rows_per_page=101", "rows_per_page"],
    ["rows_per_page=ten", "rows_per_page"],
    ["rows_per_page=", "rows_per_page"],
    ["current_page=0", "current_page"],
    ["current_page=-1", "current_page"],
    ["current_page=1.5", "current_page"],
    ["sort_by=created_at", "sort_by"],
    ["sort_by=content:asc", "sort_by"],
    ["sort_by=created_at%3Aup", "sort_by"],
  ];
  for (const [query, param] of badQueries) {
    test(`422 invalid_request for ?${query}`, async () => {
      expectError(await call(`/api/v1.0/chat/messages?${query}`, { headers: bearer(key) }), 422, "invalid_request", param);
    });
  }

  test("unknown query parameters are ignored", async () => {
    const result = await call(`/api/v1.0/chat/messages?foo=${MARK}&sort_by=id%3Aasc`, { headers: bearer(key) });
    expect(result.response.status).toBe(200);
  });

  test("503 overloaded while the model is not loaded: /readyz and chat", async () => {
    expectError(await call("/readyz"), 503, "overloaded");
    const health = await call("/healthz");
    expect(health.response.status).toBe(200);
    expect(health.body).toEqual({ status: "ok" } as never);
  });

  test("500 internal never carries the original message", () => {
    const error = toDomainError("UNKNOWN", new Error(`SQLITE_ERROR near ${MARK}`));
    expect(wireError(error).status).toBe(500);
    expect(wireError(error).code).toBe("internal");
    expect(error.message).not.toContain(MARK);
  });

  test("X-Request-Id: a safe client id is echoed, an unsafe one replaced", async () => {
    const echoed = await fetch(`${server.url}/healthz`, { headers: { "x-request-id": "client-123.abc" } });
    expect(echoed.headers.get("x-request-id")).toBe("client-123.abc");
    const replaced = await fetch(`${server.url}/healthz`, { headers: { "x-request-id": `bad id ${"x".repeat(200)}` } });
    expect(replaced.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
  });
});
