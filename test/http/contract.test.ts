/**
 * Real responses against the OpenAPI document the app serves: every route's bodies, the stream's
 * events and each error that can be provoked must match the schema documented for them.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ChatService, type TurnInput } from "../../src/chat/service";
import { oneEngine, TurnRunner } from "../../src/chat/turn-runner";
import type { CreatedKey } from "../../src/db/types";
import type { ChatReply, ConversationPage, MessagePage } from "../../src/http/contract";
import type { Engine } from "../../src/llm/engine";
import {
  allowSlowTests,
  backends,
  bearer,
  type OpenedBackend,
  readSse,
  type Served,
  type ServedDocument,
  serveApp,
  servedDocument,
  testEngine,
} from "../support";

allowSlowTests();

const CHAT = "/api/v1.0/chat";
const MESSAGES = "/api/v1.0/chat/messages";
const CONVERSATIONS = "/api/v1.0/chat/conversations";
const CONVERSATION = `${CONVERSATIONS}/{conversation_id}`;
const QUOTAS = "/api/v1.0/admin/quotas";
const USAGE = "/api/v1.0/usage";

for (const backend of backends()) {
  describe.skipIf(backend.missing !== undefined)(`on ${backend.name}`, () => {
    let db: OpenedBackend;
    let alice: CreatedKey;
    let bob: CreatedKey;
    let engine: Engine;
    /** With a model. */
    let ready: Served;
    /** Without one (503s), and a rate limit small enough to hit. */
    let loading: Served;
    /** Its generation fails once the stream has begun: the stream's `error` event. */
    let failing: Served;
    let spec: ServedDocument;

    /** Stores the user's message like the real service, then fails instead of generating. */
    class FailingAfterStart extends ChatService {
      override async *turn(input: TurnInput): ReturnType<ChatService["turn"]> {
        const turn = super.turn(input);
        const start = await turn.next();
        await turn.return(undefined);
        if (!start.done) yield start.value;
        throw new Error("the engine fell over");
      }
    }

    beforeAll(async () => {
      db = await backend.open("contract");
      alice = await db.storage.keys.create("alice", "user");
      bob = await db.storage.keys.create("bob", "user");
      engine = await testEngine({ parallel: 1 });
      ready = serveApp({ storage: db.storage, engine });
      loading = serveApp({ storage: db.storage, limits: { rateLimitPerMinute: 2 } });
      failing = serveApp({ storage: db.storage, engine, chat: new FailingAfterStart(db.storage.conversations, new TurnRunner(oneEngine(() => engine))) });
      spec = await servedDocument(ready.url);
    });
    afterAll(async () => {
      await Promise.all([ready.stop(), loading.stop(), failing.stop()]);
      await engine.close();
      await db.storage.close();
    });

    const schemaAt = (...segments: string[]) => spec.schemaAt(...segments);
    const expectValid: ServedDocument["expectValid"] = (validate, body, what) => spec.expectValid(validate, body, what);

    /** The schema the document gives `path`'s `method` for this status (the status must be documented). */
    const responseSchema = (path: string, method: string, status: number) =>
      schemaAt("paths", path, method, "responses", String(status), "content", "application/json", "schema");

    /** Reads a JSON response and checks it against its operation's documented response. */
    async function expectDocumented(path: string, method: string, response: Response): Promise<unknown> {
      expect(response.headers.get("content-type")).toBe("application/json; charset=utf-8");
      const body = await response.json();
      expectValid(responseSchema(path, method, response.status), body, `${method.toUpperCase()} ${path} ${response.status}`);
      return body;
    }

    const postChat = (server: Served, key: string, body: string, contentType = "application/json") =>
      fetch(`${server.url}${CHAT}`, { method: "POST", headers: { ...bearer(key), "content-type": contentType }, body });

    const ask = (conversation: string, extra: Record<string, unknown> = {}) =>
      JSON.stringify({ message: "Say something short", conversation_id: conversation, temperature: 0, max_tokens: 8, ...extra });

    describe("responses match the served OpenAPI document", () => {
      let reply: ChatReply;

      test("chat, not streamed", async () => {
        const response = await postChat(ready, alice.key, ask("plain"));
        expect(response.status).toBe(200);
        reply = (await expectDocumented(CHAT, "post", response)) as ChatReply;
      });

      test("chat, streamed: the data of start, delta and done", async () => {
        const response = await postChat(ready, alice.key, ask("streamed", { stream: true }));
        expect(response.status).toBe(200);
        expect(response.headers.get("content-type")).toStartWith("text/event-stream");
        const seen = new Set<string>();
        for await (const { event, data } of readSse(response)) {
          if (event === "comment") continue;
          expectValid(schemaAt("paths", CHAT, "post", "responses", "200", "content", "text/event-stream", "x-events", event), data, `event ${event}`);
          seen.add(event);
        }
        expect([...seen].sort()).toEqual(["delta", "done", "start"]);
      });

      test("chat, streamed: the data of an error event", async () => {
        const response = await postChat(failing, alice.key, ask("fails", { stream: true }));
        expect(response.status).toBe(200);
        const events = [];
        for await (const item of readSse(response)) if (item.event !== "comment") events.push(item);
        expect(events.map((item) => item.event)).toEqual(["start", "error"]);
        const schema = (event: string) => schemaAt("paths", CHAT, "post", "responses", "200", "content", "text/event-stream", "x-events", event);
        expectValid(schema("start"), events[0]!.data, "event start");
        expectValid(schema("error"), events[1]!.data, "event error");
      });

      test("the message listing", async () => {
        const response = await fetch(`${ready.url}${MESSAGES}?rows_per_page=100`, { headers: bearer(alice.key) });
        expect(response.status).toBe(200);
        const page = (await expectDocumented(MESSAGES, "get", response)) as MessagePage;
        expect(new Set(page.data.map((message) => message.role))).toEqual(new Set(["user", "assistant"]));
      });

      test("the conversation listing", async () => {
        const response = await fetch(`${ready.url}${CONVERSATIONS}?rows_per_page=100`, { headers: bearer(alice.key) });
        expect(response.status).toBe(200);
        const page = (await expectDocumented(CONVERSATIONS, "get", response)) as ConversationPage;
        expect(page.data.map((conversation) => conversation.conversation_id)).toContain("plain");
      });

      test("deleting a conversation: 204 without a body, then 404", async () => {
        expect((await postChat(ready, alice.key, ask("to-delete"))).status).toBe(200);
        const remove = () => fetch(`${ready.url}${CONVERSATIONS}/to-delete`, { method: "DELETE", headers: bearer(alice.key) });
        const deleted = await remove();
        expect(deleted.status).toBe(204);
        expect(await deleted.text()).toBe("");
        expect(Object.keys(schemaAt("paths", CONVERSATION, "delete", "responses").schema as object)).toContain("204");
        const again = await remove();
        expect(again.status).toBe(404);
        await expectDocumented(CONVERSATION, "delete", again);
      });

      test("healthz and readyz, ready and not", async () => {
        await expectDocumented("/healthz", "get", await fetch(`${ready.url}/healthz`));
        const readiness = await fetch(`${ready.url}/readyz`);
        expect(readiness.status).toBe(200);
        await expectDocumented("/readyz", "get", readiness);
        const notReady = await fetch(`${loading.url}/readyz`);
        expect(notReady.status).toBe(503);
        await expectDocumented("/readyz", "get", notReady);
      });

      const chatErrors: [string, number, () => Promise<Response>][] = [
        ["malformed JSON", 400, () => postChat(ready, alice.key, "{")],
        ["no key", 401, () => fetch(`${ready.url}${CHAT}`, { method: "POST", body: ask("x") })],
        ["an unknown key", 401, () => postChat(ready, "pk_unknown", ask("x"))],
        ["a body over the limit", 413, () => postChat(ready, alice.key, ask("x", { message: "x".repeat(70_000) }))],
        ["text/plain", 415, () => postChat(ready, alice.key, ask("x"), "text/plain")],
        ["a bad temperature", 422, () => postChat(ready, alice.key, ask("x", { temperature: 2 }))],
        ["a bad conversation id", 422, () => postChat(ready, alice.key, ask(":eq:x"))],
        [
          "an X-Conversation-Id header naming another conversation",
          422,
          () =>
            fetch(`${ready.url}${CHAT}`, {
              method: "POST",
              headers: { ...bearer(alice.key), "content-type": "application/json", "x-conversation-id": "other" },
              body: ask("x"),
            }),
        ],
        ["no model yet", 503, () => postChat(loading, alice.key, ask("x"))],
      ];
      for (const [what, status, send] of chatErrors) {
        test(`chat error: ${what} (${status})`, async () => {
          const response = await send();
          expect(response.status).toBe(status);
          await expectDocumented(CHAT, "post", response);
        });
      }

      const listingErrors: [string, number, (server: Served) => Promise<Response>][] = [
        ["no key", 401, (server) => fetch(`${server.url}${MESSAGES}`)],
        ["another user's messages", 403, (server) => fetch(`${server.url}${MESSAGES}?user_id=${alice.userId}`, { headers: bearer(bob.key) })],
        ["a bad page size", 422, (server) => fetch(`${server.url}${MESSAGES}?rows_per_page=0`, { headers: bearer(bob.key) })],
      ];
      for (const [what, status, send] of listingErrors) {
        test(`listing error: ${what} (${status})`, async () => {
          const response = await send(ready);
          expect(response.status).toBe(status);
          await expectDocumented(MESSAGES, "get", response);
        });
      }

      const conversationErrors: [string, number, string, string, () => Promise<Response>][] = [
        ["no key", 401, CONVERSATIONS, "get", () => fetch(`${ready.url}${CONVERSATIONS}`)],
        [
          "another user's conversations",
          403,
          CONVERSATIONS,
          "get",
          () => fetch(`${ready.url}${CONVERSATIONS}?user_id=${alice.userId}`, { headers: bearer(bob.key) }),
        ],
        ["a bad page", 422, CONVERSATIONS, "get", () => fetch(`${ready.url}${CONVERSATIONS}?current_page=0`, { headers: bearer(bob.key) })],
        ["delete without a key", 401, CONVERSATION, "delete", () => fetch(`${ready.url}${CONVERSATIONS}/plain`, { method: "DELETE" })],
        [
          "delete another user's",
          404,
          CONVERSATION,
          "delete",
          () => fetch(`${ready.url}${CONVERSATIONS}/plain`, { method: "DELETE", headers: bearer(bob.key) }),
        ],
        ["delete a bad id", 422, CONVERSATION, "delete", () => fetch(`${ready.url}${CONVERSATIONS}/:eq:plain`, { method: "DELETE", headers: bearer(bob.key) })],
      ];
      for (const [what, status, path, method, send] of conversationErrors) {
        test(`conversations error: ${what} (${status})`, async () => {
          const response = await send();
          expect(response.status).toBe(status);
          await expectDocumented(path, method, response);
        });
      }

      test("listing error: over the rate limit (429)", async () => {
        const list = () => fetch(`${loading.url}${MESSAGES}`, { headers: bearer(bob.key) });
        // Two requests a minute: the third in a row is refused.
        expect((await list()).status).toBe(200);
        expect((await list()).status).toBe(200);
        const response = await list();
        expect(response.status).toBe(429);
        await expectDocumented(MESSAGES, "get", response);
      });

      test("token quotas: the admin routes, the usage report, and a chat refused over its user's quota", async () => {
        const root = await db.storage.keys.create("root", "admin");
        const carol = await db.storage.keys.create("carol", "user");
        const quotas = (method: string, path: string, body?: unknown, key = root.key) =>
          fetch(`${ready.url}${QUOTAS}${path}`, {
            method,
            headers: { ...bearer(key), "content-type": "application/json" },
            ...(body === undefined ? {} : { body: JSON.stringify(body) }),
          });
        const cases: [Promise<Response>, number, string, string][] = [
          [quotas("PUT", `/${carol.userId}`, { tokens: 10, period: "day" }), 200, `${QUOTAS}/{user}`, "put"],
          [quotas("PUT", "/999999", { tokens: 1, period: "day" }), 404, `${QUOTAS}/{user}`, "put"],
          [quotas("PUT", "/carol", { tokens: 1, period: "day" }), 422, `${QUOTAS}/{user}`, "put"],
          [quotas("GET", ""), 200, QUOTAS, "get"],
          [quotas("GET", "", undefined, carol.key), 403, QUOTAS, "get"],
        ];
        for (const [sent, status, path, method] of cases) {
          const response = await sent;
          expect(response.status).toBe(status);
          await expectDocumented(path, method, response);
        }
        await db.storage.usage.add(carol.userId, new Date().toISOString().slice(0, 10), 10, 0);
        const usage = await fetch(`${ready.url}${USAGE}`, { headers: bearer(carol.key) });
        expect(((await expectDocumented(USAGE, "get", usage)) as { quota: { remaining: number } }).quota.remaining).toBe(0);
        const refused = await postChat(ready, carol.key, ask("over-quota"));
        expect(refused.status).toBe(429);
        await expectDocumented(CHAT, "post", refused);
        expect((await quotas("DELETE", `/${carol.userId}`)).status).toBe(204);
        const gone = await quotas("DELETE", `/${carol.userId}`);
        expect(gone.status).toBe(404);
        await expectDocumented(`${QUOTAS}/{user}`, "delete", gone);
      });

      test("errors outside any operation (404, 405) match the Error schema", async () => {
        const notFound = await fetch(`${ready.url}/nowhere`);
        expect(notFound.status).toBe(404);
        expectValid(schemaAt("components", "schemas", "Error"), await notFound.json(), "404");
        const wrongMethod = await fetch(`${ready.url}${CHAT}`, { headers: bearer(alice.key) });
        expect(wrongMethod.status).toBe(405);
        expectValid(schemaAt("components", "schemas", "Error"), await wrongMethod.json(), "405");
      });

      test("the schemas are strict enough to catch drift", () => {
        const chatReply = responseSchema(CHAT, "post", 200);
        expect(chatReply(reply)).toBe(true);
        expect(chatReply({ ...reply, extra: 1 })).toBe(false);
        const { usage: _, ...withoutUsage } = reply;
        expect(chatReply(withoutUsage)).toBe(false);
        expect(chatReply({ ...reply, message: { ...reply.message, role: "system" } })).toBe(false);
        expect(chatReply({ ...reply, message: { ...reply.message, created_at: "yesterday" } })).toBe(false);
        const unauthorized = responseSchema(CHAT, "post", 401);
        const error = { error: { code: "unauthorized", message: "m", request_id: "r" } };
        expect(unauthorized(error)).toBe(true);
        expect(unauthorized({ error: { ...error.error, code: "forbidden" } })).toBe(false);
        expect(unauthorized({ error: { ...error.error, found: {} } })).toBe(false);
      });
    });
  });
}
