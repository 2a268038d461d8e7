/**
 * The OpenAI-compatible API on the wire: its responses and errors against the served OpenAPI
 * document, the raw stream (unnamed events, `[DONE]`, heartbeats while queued), and a client
 * leaving mid-stream cancelling its generation.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, bearer, type Served, type ServedDocument, serveApp, servedDocument, sseEvents, testDb, testEngine, until } from "../support";

allowSlowTests();

const COMPLETIONS = "/v1/chat/completions";
const db = testDb("openai-wire");
const alice = await db.keys.create("alice", "user");
let engine: Engine;
let ready: Served;
/** No model yet: 503. */
let loading: Served;
let spec: ServedDocument;

// The bench-small model (random weights) never ends a reply by itself and takes tens of ms per
// token: a reply holds the only sequence until its client leaves.
beforeAll(async () => {
  engine = await testEngine({ preset: "bench-small", parallel: 1, contextSize: 512 });
  ready = serveApp({ storage: db.storage, engine, limits: { heartbeatMs: 20 } });
  loading = serveApp({ storage: db.storage });
  spec = await servedDocument(ready.url);
});
afterAll(async () => {
  await Promise.all([ready.stop(), loading.stop()]);
  await engine.close();
  await db.storage.close();
});

const post = (server: Served, body: unknown, key = alice.key, signal?: AbortSignal) =>
  fetch(`${server.url}${COMPLETIONS}`, { method: "POST", headers: { ...bearer(key), "content-type": "application/json" }, body: JSON.stringify(body), signal });

const ask = (extra: Record<string, unknown> = {}) => ({
  model: "any",
  messages: [{ role: "user", content: "Hello" }],
  temperature: 0,
  max_tokens: 4,
  ...extra,
});

const schemaAt = (...segments: string[]) => spec.schemaAt(...segments);
const expectValid: ServedDocument["expectValid"] = (validate, body, what) => spec.expectValid(validate, body, what);

async function expectDocumented(path: string, method: string, response: Response): Promise<unknown> {
  const body = await response.json();
  spec.expectDocumented(path, method, response.status, body);
  return body;
}

describe("responses match the served OpenAPI document", () => {
  test("a completion, a model list and a model", async () => {
    const completion = await post(ready, ask());
    expect(completion.status).toBe(200);
    await expectDocumented(COMPLETIONS, "post", completion);
    const list = await fetch(`${ready.url}/v1/models`, { headers: bearer(alice.key) });
    await expectDocumented("/v1/models", "get", list);
    const one = await fetch(`${ready.url}/v1/models/${encodeURIComponent(engine.modelName)}`, { headers: bearer(alice.key) });
    expect(one.status).toBe(200);
    await expectDocumented("/v1/models/{model}", "get", one);
  });

  test("the stream: unnamed chunk events, the usage chunk, then [DONE]", async () => {
    const response = await post(ready, ask({ stream: true, stream_options: { include_usage: true } }));
    expect(response.headers.get("content-type")).toStartWith("text/event-stream");
    const events = [];
    for await (const { event, data } of sseEvents(response)) if (event !== "comment") events.push({ event, data });
    expect(events.every(({ event }) => event === "message")).toBe(true);
    expect(events.at(-1)!.data).toBe("[DONE]");
    const chunk = schemaAt("components", "schemas", "ChatCompletionChunk");
    for (const { data } of events.slice(0, -1)) expectValid(chunk, JSON.parse(data), "a chunk");
  });

  const errors: [string, number, () => Promise<Response>][] = [
    [
      "malformed JSON",
      400,
      () => fetch(`${ready.url}${COMPLETIONS}`, { method: "POST", headers: { ...bearer(alice.key), "content-type": "application/json" }, body: "{" }),
    ],
    ["n: 2", 400, () => post(ready, ask({ n: 2 }))],
    ["a stop list of 5", 400, () => post(ready, ask({ stop: ["a", "b", "c", "d", "e"] }))],
    ["an image part", 400, () => post(ready, ask({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }))],
    ["an unknown key", 401, () => post(ready, ask(), "pk_unknown")],
    ["text/plain", 415, () => fetch(`${ready.url}${COMPLETIONS}`, { method: "POST", headers: bearer(alice.key), body: "hi" })],
    ["no model yet", 503, () => post(loading, ask())],
  ];
  for (const [what, status, send] of errors) {
    test(`error: ${what} (${status})`, async () => {
      const response = await send();
      expect(response.status).toBe(status);
      await expectDocumented(COMPLETIONS, "post", response);
    });
  }

  test("a response, whole and as its typed events, and a refusal", async () => {
    const respond = (body: Record<string, unknown>) =>
      fetch(`${ready.url}/v1/responses`, {
        method: "POST",
        headers: { ...bearer(alice.key), "content-type": "application/json" },
        body: JSON.stringify({ model: "any", input: "Hello", store: false, temperature: 0, max_output_tokens: 4, ...body }),
      });
    const whole = await respond({});
    expect(whole.status).toBe(200);
    await expectDocumented("/v1/responses", "post", whole);
    const streamed = await respond({ stream: true });
    const event = schemaAt("components", "schemas", "ResponseEvent");
    const response = schemaAt("components", "schemas", "ResponseObject");
    const names: string[] = [];
    for await (const { event: name, data } of sseEvents(streamed)) {
      if (name === "comment") continue;
      const payload = JSON.parse(data) as { type: string; response?: unknown };
      // Each named event carries its name as its type, as OpenAI writes them.
      expect(payload.type).toBe(name);
      names.push(name);
      expectValid(event, payload, `event ${name}`);
      if (payload.response !== undefined) expectValid(response, payload.response, `the response of ${name}`);
    }
    expect(names.at(-1)).toBe("response.incomplete");
    const refused = await respond({ background: true });
    expect(refused.status).toBe(400);
    await expectDocumented("/v1/responses", "post", refused);
  });

  test("kept responses and conversations: each route's answers, and not found", async () => {
    const call = (method: string, path: string, body?: unknown) =>
      fetch(`${ready.url}${path}`, {
        method,
        headers: { ...bearer(alice.key), ...(body === undefined ? {} : { "content-type": "application/json" }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    const conversation = (await expectDocumented(
      "/v1/conversations",
      "post",
      await call("POST", "/v1/conversations", { items: [{ role: "user", content: "Hi" }], metadata: { a: "b" } }),
    )) as { id: string };
    const at = `/v1/conversations/${conversation.id}`;
    await expectDocumented("/v1/conversations/{id}", "get", await call("GET", at));
    await expectDocumented("/v1/conversations/{id}", "post", await call("POST", at, { metadata: { a: "c" } }));
    const response = (await expectDocumented(
      "/v1/responses",
      "post",
      await call("POST", "/v1/responses", { model: "any", input: "Hello", conversation: conversation.id, max_output_tokens: 4 }),
    )) as { id: string };
    await expectDocumented("/v1/responses/{id}", "get", await call("GET", `/v1/responses/${response.id}`));
    await expectDocumented("/v1/responses/{id}/input_items", "get", await call("GET", `/v1/responses/${response.id}/input_items`));
    const items = (await expectDocumented("/v1/conversations/{id}/items", "get", await call("GET", `${at}/items?order=asc`))) as { data: { id: string }[] };
    expect(items.data).toHaveLength(3);
    await expectDocumented(
      "/v1/conversations/{id}/items",
      "post",
      await call("POST", `${at}/items`, { items: [{ type: "message", role: "system", content: "Be brief." }] }),
    );
    await expectDocumented("/v1/conversations/{id}/items/{item_id}", "get", await call("GET", `${at}/items/${items.data[0]!.id}`));
    await expectDocumented("/v1/conversations/{id}/items/{item_id}", "delete", await call("DELETE", `${at}/items/${items.data[0]!.id}`));
    await expectDocumented("/v1/responses/{id}", "delete", await call("DELETE", `/v1/responses/${response.id}`));
    const background = (await expectDocumented(
      "/v1/responses",
      "post",
      await call("POST", "/v1/responses", { model: "any", input: "Go on", background: true, max_output_tokens: 400 }),
    )) as { id: string };
    const cancelled = (await expectDocumented("/v1/responses/{id}/cancel", "post", await call("POST", `/v1/responses/${background.id}/cancel`))) as {
      status: string;
    };
    expect(cancelled.status).toBe("cancelled");
    await expectDocumented("/v1/conversations/{id}", "delete", await call("DELETE", at));
    for (const [method, path] of [
      ["GET", at],
      ["GET", `${at}/items`],
      ["GET", `/v1/responses/${response.id}`],
      ["DELETE", `/v1/responses/${response.id}`],
    ] as const) {
      const missing = await call(method, path);
      expect(missing.status).toBe(404);
      await expectDocumented(
        path.startsWith("/v1/responses") ? "/v1/responses/{id}" : path.endsWith("/items") ? "/v1/conversations/{id}/items" : "/v1/conversations/{id}",
        method.toLowerCase(),
        missing,
      );
    }
  });

  test("error: an unknown model (404)", async () => {
    const response = await fetch(`${ready.url}/v1/models/gpt-4o`, { headers: bearer(alice.key) });
    expect(response.status).toBe(404);
    await expectDocumented("/v1/models/{model}", "get", response);
  });
});

describe("streams", () => {
  test("a queued stream gets heartbeats; a client leaving mid-stream stops its generation", async () => {
    const first = new AbortController();
    const running = await post(ready, ask({ stream: true, max_tokens: 4096, temperature: 1 }), alice.key, first.signal);
    const firstEvents = sseEvents(running);
    await firstEvents.next();
    await until(() => engine.stats().busy === 1, "the first completion to hold the only sequence");

    const queued = sseEvents(await post(ready, ask({ stream: true })));
    await until(() => engine.stats().queued === 1, "the second completion to queue");
    // Read with next(): leaving a for-await loop would cancel the body, a disconnect.
    const seen: string[] = [];
    while (seen.at(-1) !== "ping") {
      const { event, data } = (await queued.next()).value!;
      seen.push(event === "comment" ? data : JSON.parse(data).choices[0].delta.role);
    }
    expect(seen).toEqual(["assistant", "ping"]);

    first.abort();
    // Generation stops within a token or so: far sooner than the first reply's 4096 tokens.
    await until(() => engine.stats().queued === 0, "the queued completion to get the sequence", 5_000);
    let last = "";
    for await (const { data } of queued) last = data;
    expect(last).toBe("[DONE]");
    await until(() => engine.stats().busy === 0, "the sequence to be free");
  });
});
