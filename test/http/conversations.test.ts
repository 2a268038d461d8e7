/** Conversations as a resource: GET /api/v1.0/chat/conversations and DELETE …/{conversation_id}. */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { ChatService } from "../../src/chat/service";
import { oneEngine, TurnRunner } from "../../src/chat/turn-runner";
import type { ChatReply, ConversationPage, MessagePage } from "../../src/http/contract";
import { Engine } from "../../src/llm/engine";
import { allowSlowTests, bearer, postChat, presetModel, type Served, serveApp, testDb, until } from "../support";

allowSlowTests();

const LIST = "/api/v1.0/chat/conversations";
const db = testDb("conversations-http");
const kvDir = join(db.dir, "kv");
let alice: { key: string; userId: number };
let bob: { key: string; userId: number };
let admin: { key: string; userId: number };
let engine: Engine;
let served: Served;

beforeAll(async () => {
  alice = await db.keys.create("alice", "user");
  bob = await db.keys.create("bob", "user");
  admin = await db.keys.create("root", "admin");
  // One sequence: each conversation that takes it saves the previous one's KV state to a file.
  engine = await Engine.load({
    modelPath: await presetModel("demo"),
    parallel: 1,
    contextSize: 1024,
    threads: 1,
    kvCache: { dir: kvDir, maxBytes: 64 * 2 ** 20 },
  });
  served = serveApp({ storage: db.storage, engine });
});
afterAll(async () => {
  await served.stop();
  await engine.close();
  await db.storage.close();
});

async function chat(key: string, conversationId: string, message: string, maxTokens = 4): Promise<ChatReply> {
  const response = await postChat(served.url, key, { message, conversation_id: conversationId, temperature: 0, max_tokens: maxTokens });
  expect(response.status).toBe(200);
  return (await response.json()) as ChatReply;
}

const get = (path: string, key: string) => fetch(`${served.url}${path}`, { headers: bearer(key) });
const remove = (conversationId: string, key: string) =>
  fetch(`${served.url}${LIST}/${encodeURIComponent(conversationId)}`, { method: "DELETE", headers: bearer(key) });

async function list(key: string, query = ""): Promise<ConversationPage> {
  const response = await get(`${LIST}${query}`, key);
  expect(response.status).toBe(200);
  return (await response.json()) as ConversationPage;
}

async function messages(key: string, conversationId?: string): Promise<MessagePage> {
  const filter = conversationId === undefined ? "" : `&conversation_id=${conversationId}`;
  return (await (await get(`/api/v1.0/chat/messages?rows_per_page=100${filter}`, key)).json()) as MessagePage;
}

/** The saved KV state of a conversation, by its row id: kv/<model>/<hash>.kv. */
function kvFileOf(conversationId: string, userId: number): string | undefined {
  const row = db.storage.sqlite.query("SELECT id FROM conversations WHERE user_id = ? AND external_id = ?").get(userId, conversationId) as {
    id: number;
  } | null;
  if (!row) throw new Error(`no conversation ${conversationId}`);
  const name = `${createHash("sha256").update(String(row.id)).digest("hex").slice(0, 32)}.kv`;
  return readdirSync(kvDir, { recursive: true, encoding: "utf8" }).find((path) => path.endsWith(name));
}

describe("GET /api/v1.0/chat/conversations", () => {
  test("three conversations: newest activity first, with counts, titles, and pages", async () => {
    const long = `Plan a trip ${"to the mountains and back ".repeat(8)}`;
    await chat(alice.key, "trip", long);
    await chat(alice.key, "recipes", "What can I cook with leeks?");
    await chat(alice.key, "music", "Name a fugue");
    await chat(alice.key, "trip", "And in winter?"); // the oldest conversation has the newest message now

    const page = await list(alice.key);
    expect(page.data.map((item) => [item.conversation_id, item.message_count])).toEqual([
      ["trip", 4],
      ["music", 2],
      ["recipes", 2],
    ]);
    expect(page.data.map((item) => item.title)).toEqual([long.slice(0, 100), "Name a fugue", "What can I cook with leeks?"]);
    expect(page.pagination).toEqual({ current_page: 1, rows_per_page: 20, total_rows: 3, total_pages: 1 });
    const trip = page.data[0]!;
    const tripMessages = (await messages(alice.key, "trip")).data;
    expect(trip.updated_at).toBe(tripMessages[0]!.created_at);
    expect(trip.created_at <= tripMessages.at(-1)!.created_at).toBe(true);

    const second = await list(alice.key, "?rows_per_page=2&current_page=2");
    expect(second.data).toEqual([page.data[2]!]);
    expect(second.pagination).toEqual({ current_page: 2, rows_per_page: 2, total_rows: 3, total_pages: 2 });
    expect((await list(alice.key, "?rows_per_page=2&current_page=9")).data).toEqual([]);
  });

  test("a user key sees only its own; an admin key may name any user", async () => {
    expect((await list(bob.key)).data).toEqual([]);
    const refused = await get(`${LIST}?user_id=${alice.userId}`, bob.key);
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as { error: { param: string } }).error.param).toBe("user_id");
    expect((await list(alice.key, `?user_id=:eq:${alice.userId}`)).pagination.total_rows).toBe(3);
    expect((await list(admin.key, `?user_id=:eq:${alice.userId}`)).pagination.total_rows).toBe(3);
  });

  test("the paging parameters are validated like the message listing's", async () => {
    for (const [query, param] of [
      ["?rows_per_page=0", "rows_per_page"],
      ["?current_page=x", "current_page"],
      ["?user_id=:gt:1", "user_id"],
    ]) {
      const response = await get(`${LIST}${query}`, alice.key);
      expect(response.status).toBe(422);
      expect(((await response.json()) as { error: { param: string } }).error.param).toBe(param!);
    }
    expect((await fetch(`${served.url}${LIST}`)).status).toBe(401);
  });
});

describe("DELETE /api/v1.0/chat/conversations/{conversation_id}", () => {
  test("removes the messages, the counts and the saved KV state; the id then starts afresh", async () => {
    await chat(alice.key, "doomed:1", "Remember the number seven");
    await chat(alice.key, "bystander", "Hello"); // takes the only sequence: doomed's state goes to disk
    // Captured before bystander's prompt; its checksum, sidecar and renames finish behind.
    await until(() => kvFileOf("doomed:1", alice.userId) !== undefined, "doomed's saved state on disk");
    const kvDirFiles = () => readdirSync(kvDir, { recursive: true, encoding: "utf8" }).filter((path) => path.endsWith(".kv"));
    const before = kvDirFiles().length;
    const total = (await messages(alice.key)).pagination.total_rows;
    const doomedRow = db.storage.sqlite.query("SELECT id FROM conversations WHERE external_id = 'doomed:1'").get() as { id: number };

    const response = await remove("doomed:1", alice.key);
    expect(response.status).toBe(204);
    expect(await response.text()).toBe("");

    expect((await messages(alice.key, "doomed:1")).data).toEqual([]);
    expect((await messages(alice.key)).pagination.total_rows).toBe(total - 2);
    expect((await list(alice.key)).data.map((item) => item.conversation_id)).not.toContain("doomed:1");
    expect(db.storage.sqlite.query("SELECT count(*) AS n FROM conversation_message_counts WHERE conversation_id = ?").get(doomedRow.id)).toEqual({ n: 0 });
    expect(kvDirFiles()).toHaveLength(before - 1);

    const again = await chat(alice.key, "doomed:1", "Which number?");
    expect(again.new_conversation).toBe(true);
    expect((await messages(alice.key, "doomed:1")).pagination.total_rows).toBe(2);
  });

  test("deleting the conversation a sequence holds keeps it from being saved later", async () => {
    await chat(alice.key, "held", "Hold this");
    expect((await remove("held", alice.key)).status).toBe(204);
    const files = () => readdirSync(kvDir, { recursive: true, encoding: "utf8" }).filter((path) => path.endsWith(".kv")).length;
    const before = files();
    await chat(alice.key, "next", "Something else"); // would have saved "held" had it been kept
    expect(files()).toBe(before);
  });

  test("another user's conversation is a 404, and stays intact", async () => {
    await chat(alice.key, "private", "Only mine");
    const response = await remove("private", bob.key);
    expect(response.status).toBe(404);
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe("not_found");
    expect((await messages(alice.key, "private")).pagination.total_rows).toBe(2);
    expect((await remove("never-was", alice.key)).status).toBe(404);
  });

  test("an invalid id is a 422; no key is a 401; other methods are 405", async () => {
    const invalid = await remove(":eq:x", alice.key);
    expect(invalid.status).toBe(422);
    expect(((await invalid.json()) as { error: { param: string } }).error.param).toBe("conversation_id");
    expect((await fetch(`${served.url}${LIST}/private`, { method: "DELETE" })).status).toBe(401);
    const wrong = await fetch(`${served.url}${LIST}/private`, { method: "PUT", headers: bearer(alice.key) });
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get("allow")).toBe("DELETE, OPTIONS");
  });

  test("a delete during a running reply leaves nothing of the conversation behind", async () => {
    const streaming = await postChat(served.url, alice.key, {
      message: "Talk at length",
      conversation_id: "busy",
      temperature: 0,
      max_tokens: 48,
      stream: true,
    });
    const reader = streaming.body!.getReader();
    await reader.read(); // the stream has begun: the turn holds the conversation
    const deleting = remove("busy", alice.key);
    while (!(await reader.read()).done);
    expect((await deleting).status).toBe(204);
    expect((await messages(alice.key, "busy")).data).toEqual([]);
  });
});

describe("PARLEY_SYSTEM_PROMPT", () => {
  test("goes before the history of every turn, and is not stored", async () => {
    const prompts: string[] = [];
    const persona = "You are Captain Parley, a pirate.";
    const spying = oneEngine(
      () =>
        engine &&
        (Object.assign(Object.create(engine), {
          generate(this: Engine, request: Parameters<Engine["generate"]>[0]) {
            prompts.push(JSON.stringify(request.history));
            return engine.generate(request);
          },
        }) as Engine),
    );
    const withPersona = serveApp({
      storage: db.storage,
      engine,
      chat: new ChatService(db.storage.conversations, new TurnRunner(spying), { systemPrompt: persona }),
    });
    try {
      const response = await postChat(withPersona.url, alice.key, { message: "Who are you?", conversation_id: "persona", temperature: 0, max_tokens: 4 });
      expect(response.status).toBe(200);
      expect(JSON.parse(prompts[0]!)).toEqual([
        { role: "system", content: persona },
        { role: "user", content: "Who are you?" },
      ]);
      expect((await messages(alice.key, "persona")).data.map((message) => message.role)).toEqual(["assistant", "user"]);
    } finally {
      await withPersona.stop();
    }
  });
});
