import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Validator } from "@seriousme/openapi-schema-validator";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, bearer, postChat, type Served, serveApp, testDb, testEngine, until } from "../support";

allowSlowTests();

const db = testDb("observability");
const admin = await db.keys.create("ops", "admin");
const user = await db.keys.create("alice", "user");
const SECRET_TEXT = "my-very-private-message-4412";
const logLines: string[] = [];
let engine: Engine;
let server: Served;

beforeAll(async () => {
  engine = await testEngine();
  server = serveApp({ storage: db.storage, engine, logLines, limits: { rateLimitPerMinute: 1000 }, node: "node-a:8081" });
});
afterAll(async () => {
  await server.stop();
  await engine.close();
});

interface Family {
  name: string;
  type: string;
  metrics: { value?: string; labels?: Record<string, string>; buckets?: Record<string, string>; count?: string }[];
}

async function scrape(key = admin.key): Promise<Map<string, Family>> {
  const response = await fetch(`${server.url}/metrics`, { headers: bearer(key) });
  expect(response.status).toBe(200);
  expect(response.headers.get("content-type")).toContain("text/plain");
  const families = parsePrometheusTextFormat(await response.text()) as Family[];
  return new Map(families.map((family) => [family.name, family]));
}

const total = (family: Family | undefined, labels: Record<string, string> = {}) =>
  (family?.metrics ?? [])
    .filter((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v))
    .reduce((sum, m) => sum + Number(m.value ?? m.count ?? 0), 0);

const chat = (body: Record<string, unknown>, key = user.key) => postChat(server.url, key, body);

describe("/metrics", () => {
  test("needs an admin key by default", async () => {
    expect((await fetch(`${server.url}/metrics`)).status).toBe(401);
    expect((await fetch(`${server.url}/metrics`, { headers: bearer(user.key) })).status).toBe(403);
  });

  test("parses as Prometheus text and changes after a chat", async () => {
    const before = await scrape();
    const response = await chat({ message: "Hello!", conversation_id: "metered", stream: true });
    await response.text();
    await chat({ message: "Again", conversation_id: "metered" });
    const after = await scrape();

    for (const name of [
      "parley_http_requests_total",
      "parley_http_request_duration_seconds",
      "parley_time_to_first_token_seconds",
      "parley_tokens_generated_total",
      "parley_generation_tokens_per_second",
      "parley_prompt_tokens_total",
      "parley_queue_depth",
      "parley_sequences_busy",
      "parley_rate_limit_rejections_total",
      "parley_model_load_seconds",
    ]) {
      expect(after.has(name)).toBe(true);
    }
    const chats = { route: "/api/v1.0/chat", method: "POST", status: "200" };
    expect(total(after.get("parley_http_requests_total"), chats) - total(before.get("parley_http_requests_total"), chats)).toBe(2);
    expect(total(after.get("parley_tokens_generated_total"))).toBeGreaterThan(total(before.get("parley_tokens_generated_total")));
    expect(total(after.get("parley_time_to_first_token_seconds")) - total(before.get("parley_time_to_first_token_seconds"))).toBe(2);
    expect(total(after.get("parley_prompt_tokens_total"), { source: "cached" })).toBeGreaterThan(0);
    expect(total(after.get("parley_prompt_tokens_total"), { source: "evaluated" })).toBeGreaterThan(0);
    expect(total(after.get("parley_sequences_busy"))).toBe(0);
  });

  test("a request refused before routing is counted under its route's pattern, also for a route with a parameter", async () => {
    await fetch(`${server.url}/api/v1.0/chat/conversations/${crypto.randomUUID()}`, { method: "DELETE" });
    const families = await scrape();
    const refused = { route: "/api/v1.0/chat/conversations/:conversation_id", method: "DELETE", status: "401" };
    expect(total(families.get("parley_http_requests_total"), refused)).toBe(1);
  });

  test("unknown paths are counted under one label, not one per path", async () => {
    await fetch(`${server.url}/no/such/${crypto.randomUUID()}`);
    const families = await scrape();
    const labels = families.get("parley_http_requests_total")!.metrics.map((m) => m.labels?.route);
    expect(labels).toContain("unmatched");
    expect(labels.some((route) => route?.startsWith("/no/such"))).toBe(false);
  });
});

describe("logs", () => {
  test("one JSON line per request with its fields, and never a key or message text", async () => {
    logLines.length = 0;
    await chat({ message: SECRET_TEXT, conversation_id: "logged" });
    await chat({ message: SECRET_TEXT, conversation_id: "logged", stream: true }).then((r) => r.text());
    await chat({ message: SECRET_TEXT, conversation_id: "logged", temperature: 7 });
    await fetch(`${server.url}/api/v1.0/chat/messages`, { headers: { authorization: `Bearer ${user.key}x` } });
    // A balancer's health checks are logged at debug level only, below this logger's info.
    for (const path of ["/healthz", "/readyz"]) expect((await fetch(`${server.url}${path}`)).headers.get("x-parley-node")).toBe("node-a:8081");
    // Lines are written in order: once this one's is there, theirs would be too.
    await fetch(`${server.url}/api/v1.0/chat/messages`, { headers: bearer(user.key) });

    // Lines of the previous test's scrapes may still arrive: they are written after the response.
    const requestLines = () =>
      logLines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((entry) => entry.msg === "request" && entry.route !== "/metrics");
    await until(() => requestLines().length >= 5, "a log line for each of the five requests");
    const requests = requestLines();
    expect(requests.map((entry) => entry.status)).toEqual([200, 200, 422, 401, 200]);
    expect(requests.map((entry) => entry.route)).not.toContain("/readyz");
    for (const entry of requests) {
      expect(entry).toMatchObject({ level: "info", method: expect.any(String), route: expect.any(String) });
      expect(typeof entry.time).toBe("string");
      expect(typeof entry.request_id).toBe("string");
      expect(typeof entry.duration_ms).toBe("number");
    }
    expect(requests[0]).toMatchObject({ route: "/api/v1.0/chat", user_id: user.userId, conversation_id: "logged", tokens: expect.any(Number) });
    expect(requests[3]).toMatchObject({ route: "/api/v1.0/chat/messages", method: "GET", error_code: "unauthorized" });
    // A refusal's line names its code and the field at fault; a served request's names neither.
    expect(requests[2]).toMatchObject({ status: 422, error_code: "invalid_request", param: "temperature" });
    expect(requests[0]!.error_code).toBeUndefined();
    expect(requests[1]!.tokens).toBeGreaterThan(0);

    const all = logLines.join("\n");
    expect(all).not.toContain(SECRET_TEXT);
    expect(all).not.toContain(user.key);
    expect(all).not.toContain(user.key.slice(3, 20));
    expect(all.toLowerCase()).not.toContain("bearer");
  });
});

describe("OpenAPI", () => {
  test("/openapi.json is a valid OpenAPI 3 document describing both endpoints, auth, errors and the stream", async () => {
    const response = await fetch(`${server.url}/openapi.json`);
    expect(response.status).toBe(200);
    const document = (await response.json()) as {
      openapi: string;
      paths: Record<string, Record<string, { responses: Record<string, unknown>; security?: unknown; requestBody?: unknown }>>;
      components: { securitySchemes: Record<string, { scheme: string }> };
    };
    const result = await new Validator().validate(document as never);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(document.openapi).toStartWith("3.");
    expect(document.components.securitySchemes.bearer!.scheme).toBe("bearer");

    const chatOperation = document.paths["/api/v1.0/chat"]!.post!;
    expect(chatOperation.security).toEqual([{ bearer: [] }]);
    expect(chatOperation.requestBody).toBeDefined();
    expect(Object.keys(chatOperation.responses)).toEqual(expect.arrayContaining(["200", "400", "401", "413", "415", "422", "429", "503", "500"]));
    expect(JSON.stringify(chatOperation.responses["200"])).toContain("text/event-stream");
    const listOperation = document.paths["/api/v1.0/chat/messages"]!.get!;
    expect(Object.keys(listOperation.responses)).toEqual(expect.arrayContaining(["200", "401", "403", "422"]));
    // Every route the service answers is in it, the documents and pages too.
    for (const path of ["/metrics", "/", "/docs", "/openapi.json", "/healthz"]) expect(Object.keys(document.paths), path).toContain(path);
    expect(document.paths["/metrics"]!.get!.security).toEqual([{ bearer: ["admin"] }]);
    expect(Object.keys(document.paths["/metrics"]!.get!.responses["200"] as object)).toContain("content");
  });

  test("/docs is served with its assets from Parley itself, nothing from a CDN", async () => {
    const page = await fetch(`${server.url}/docs`);
    expect(page.status).toBe(200);
    const html = await page.text();
    const references = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((match) => match[1]!);
    expect(references.length).toBeGreaterThanOrEqual(2);
    for (const reference of references) {
      expect(reference).toStartWith("/");
      const asset = await fetch(`${server.url}${reference}`);
      expect(asset.status).toBe(200);
      expect((await asset.arrayBuffer()).byteLength).toBeGreaterThan(10_000);
    }
    expect(html).not.toMatch(/https?:\/\//);
  });
});
