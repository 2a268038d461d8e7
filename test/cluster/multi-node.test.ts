/**
 * Three `parley serve` nodes sharing one PostgreSQL behind the shipped HAProxy configuration:
 * conversations stay on one node, survive a node killed mid-traffic, a revoked key is refused
 * everywhere, a user's token quota holds across them, and turns of one conversation sent to two
 * nodes at once are serialized.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import postgres from "postgres";
import type { ChatReply, UsageReport } from "../../src/http/contract";
import {
  allowSlowTests,
  type Balancer,
  bearer,
  type ChildServer,
  freshPostgresDb,
  haproxyMissing,
  postgresMissing,
  readSse,
  seededRandom,
  sharedPostgres,
  startHaproxy,
  startServer,
  tempDir,
  until,
} from "../support";

allowSlowTests();

setDefaultTimeout(120_000);

const ROOT = join(import.meta.dir, "../..");
const ADMIN_KEY = "cluster-test-admin-key-0123456789abcdef";
const CONVERSATIONS = 30;
const TURNS = 5;
const missing = postgresMissing() ?? haproxyMissing();

/** One turn as a client sees it: acknowledged once the reply (or the stream's `done`) arrived. */
interface Acked {
  conversation: string;
  content: string;
  reply: ChatReply;
}

describe.skipIf(missing !== undefined)("three nodes, one PostgreSQL, HAProxy", () => {
  let db: string;
  let nodes: ChildServer[] = [];
  let balancer: Balancer;
  const random = seededRandom();

  beforeAll(async () => {
    db = await freshPostgresDb("cluster");
    // All three start at once on an empty database: one migrates, the others wait for it.
    nodes = await Promise.all(
      [1, 2, 3].map((n) =>
        startServer({
          dbPath: db,
          adminKey: ADMIN_KEY,
          timeoutMs: 60_000,
          env: { PARLEY_DATA_DIR: tempDir(`node${n}`), PARLEY_LEASE_TTL_S: "2", PARLEY_PARALLEL: "2", PARLEY_RATE_LIMIT: "0" },
        }),
      ),
    );
    balancer = await startHaproxy(nodes.map((node) => node.url));
  });
  afterAll(async () => {
    await balancer?.stop();
    await Promise.all(nodes.map((node) => node.stop()));
  });

  /** `parley ...` against the same database. */
  async function cli(...args: string[]): Promise<string> {
    const child = Bun.spawn(["bun", "src/cli.ts", ...args], { cwd: ROOT, env: { ...Bun.env, PARLEY_DB: db }, stdout: "pipe", stderr: "pipe" });
    const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    if (code !== 0) throw new Error(`parley ${args.join(" ")} exited ${code}: ${err}`);
    return out;
  }
  const keysCli = (...args: string[]) => cli("keys", ...args);

  async function newKey(user: string): Promise<{ key: string; id: string }> {
    const out = await keysCli("create", "--user", user);
    return { key: out.trim().split("\n").at(-1)!, id: /key (\d+)/.exec(out)![1]! };
  }

  /** One turn through `url`; streamed or plain. Resolves to the reply, or throws on any failure. */
  async function turn(url: string, key: string, conversation: string, content: string, stream: boolean, header = true): Promise<ChatReply> {
    const response = await fetch(`${url}/api/v1.0/chat`, {
      method: "POST",
      headers: { ...bearer(key), "content-type": "application/json", ...(header ? { "x-conversation-id": conversation } : {}) },
      body: JSON.stringify({ conversation_id: conversation, message: content, stream, max_tokens: 8, temperature: 0 }),
    });
    if (response.status !== 200) throw new Error(`status ${response.status}: ${await response.text()}`);
    if (!stream) return (await response.json()) as ChatReply;
    for await (const { event, data } of readSse(response)) {
      if (event === "done") return data as ChatReply;
      if (event === "error") throw new Error(`error event: ${JSON.stringify(data)}`);
    }
    throw new Error("the stream ended without done");
  }

  /** Retries a turn (a new attempt is a new message) until acknowledged: what a client does when its node dies. */
  async function turnUntilAcked(key: string, conversation: string, label: string, stream: boolean, header: boolean): Promise<Acked> {
    const deadline = Date.now() + 60_000;
    for (let attempt = 1; ; attempt++) {
      const content = `${label} attempt ${attempt}`;
      try {
        return { conversation, content, reply: await turn(balancer.url, key, conversation, content, stream, header) };
      } catch (error) {
        if (Date.now() > deadline) throw error;
        await Bun.sleep(100 * attempt);
      }
    }
  }

  const acked: Acked[] = [];
  let key: string;

  test("every turn of a conversation lands on one node: follow-ups reuse its cache", async () => {
    key = (await newKey("carol")).key;
    const conversations = Array.from({ length: CONVERSATIONS }, (_, i) => `conv-${i}`);
    const gaps: number[] = [];
    await Promise.all(
      conversations.map(async (conversation, i) => {
        let previous: ChatReply | undefined;
        for (let t = 1; t <= TURNS; t++) {
          // Streamed and plain; half the clients name the conversation in a header, half only in the body.
          const reply = await turn(balancer.url, key, conversation, `turn ${t}`, i % 2 === 0, i % 4 < 2);
          acked.push({ conversation, content: `turn ${t}`, reply });
          // The node already held everything the previous turn's prompt held: this conversation's cache.
          if (previous) gaps.push(reply.usage.cached_tokens! - previous.usage.prompt_tokens);
          previous = reply;
        }
      }),
    );
    gaps.sort((a, b) => a - b);
    console.log(`affinity: cached tokens minus the previous turn's prompt tokens, over ${gaps.length} follow-ups: min ${gaps[0]}, max ${gaps.at(-1)}`);
    expect(gaps[0]!).toBeGreaterThanOrEqual(0);
  });

  test("an OpenAI client's growing history keeps its cache without naming a conversation: its key picks the node", async () => {
    const messages: { role: string; content: string }[] = [];
    const usages: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } }[] = [];
    for (let turn = 1; turn <= 4; turn++) {
      messages.push({ role: "user", content: `question ${turn} about the sea and the hills` });
      const response = await fetch(`${balancer.url}/v1/chat/completions`, {
        method: "POST",
        headers: { ...bearer(key), "content-type": "application/json" },
        body: JSON.stringify({ model: "parley", messages, max_tokens: 8, temperature: 0 }),
      });
      expect(response.status).toBe(200);
      const body = (await response.json()) as { choices: { message: { content: string } }[]; usage: (typeof usages)[number] };
      messages.push({ role: "assistant", content: body.choices[0]!.message.content });
      usages.push(body.usage);
    }
    // Each follow-up found the node holding everything the request before it evaluated.
    for (let i = 1; i < usages.length; i++) expect(usages[i]!.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(usages[i - 1]!.prompt_tokens);
  });

  test("a node killed mid-traffic: its conversations go on elsewhere with their whole history, nothing acknowledged lost, nothing doubled or reordered", async () => {
    const conversations = Array.from({ length: CONVERSATIONS }, (_, i) => `conv-${i}`);
    const killAfter = random.int(5, 20);
    let done = 0;
    const victim = nodes[random.int(0, 2)]!;
    const killed = until(() => done >= killAfter, "some turns before the kill", 60_000).then(() => victim.child.kill("SIGKILL"));
    const more = await Promise.all(
      conversations.map(async (conversation, i) => {
        const mine: Acked[] = [];
        for (let t = TURNS + 1; t <= TURNS + 3; t++) {
          mine.push(await turnUntilAcked(key, conversation, `turn ${t}`, i % 2 === 0, i % 4 < 2));
          done++;
        }
        return mine;
      }),
    );
    await killed;
    await victim.child.exited;
    acked.push(...more.flat());
    const retried = more.flat().filter((a) => !a.content.endsWith("attempt 1")).length;
    console.log(`killed node ${nodes.indexOf(victim) + 1} (seed ${random.seed}) after ${killAfter} turns; ${retried} turns needed a retry`);

    const { socketDir } = await sharedPostgres();
    const sql = postgres({ host: socketDir, user: "postgres", database: new URL(db).pathname.slice(1), max: 1 });
    try {
      for (const conversation of conversations) {
        const rows = await sql<{ id: number; role: string; content: string }[]>`
          SELECT m.id::int AS id, m.role, m.content FROM messages m JOIN conversations c ON c.id = m.conversation_id
          WHERE c.external_id = ${conversation} ORDER BY m.created_at, m.id`;
        const mine = acked.filter((a) => a.conversation === conversation);
        // Each acknowledged turn: its user message then its reply, exactly once, in the order acknowledged.
        const stored = rows.map((row) => row.id);
        const positions = mine.map((a) => {
          const at = stored.indexOf(a.reply.user_message.id);
          expect(at).toBeGreaterThanOrEqual(0);
          expect(stored[at + 1]).toBe(a.reply.message.id);
          expect(rows.filter((row) => row.content === a.content && row.role === "user")).toHaveLength(1);
          return at;
        });
        expect(positions).toEqual([...positions].sort((a, b) => a - b));
        // The history grew on whichever node answered: every reply saw all the turns before it.
        const prompts = mine.map((a) => a.reply.usage.prompt_tokens);
        for (let i = 1; i < prompts.length; i++) expect(prompts[i]!).toBeGreaterThan(prompts[i - 1]!);
      }
    } finally {
      await sql.end();
    }
  });

  test("a key revoked with `parley keys revoke` is refused by every node", async () => {
    const { key: doomed, id } = await newKey("dave");
    const live = nodes.filter((node) => node.child.exitCode === null && node.child.signalCode === null);
    for (const node of live) expect((await fetch(`${node.url}/api/v1.0/chat/messages`, { headers: bearer(doomed) })).status).toBe(200);
    await keysCli("revoke", id);
    for (const node of live) expect((await fetch(`${node.url}/api/v1.0/chat/messages`, { headers: bearer(doomed) })).status).toBe(401);
  });

  test("a user's token quota set with `parley quota` holds on every node: concurrent turns spread over them never pass it, and used is their usage's sum", async () => {
    const { key: spender } = await newKey("quentin");
    const limit = 600;
    await cli("quota", "set", "--user", "quentin", "--tokens", String(limit), "--period", "day");
    const live = nodes.filter((node) => node.child.exitCode === null && node.child.signalCode === null);
    const answers = await Promise.all(
      Array.from({ length: 24 }, async (_, i) => {
        const response = await fetch(`${live[i % live.length]!.url}/api/v1.0/chat`, {
          method: "POST",
          headers: { ...bearer(spender), "content-type": "application/json" },
          body: JSON.stringify({ conversation_id: `budget-${i}`, message: `spend ${i}`, max_tokens: random.int(4, 40), temperature: 0 }),
        });
        return { status: response.status, body: (await response.json()) as ChatReply & { error?: { code: string } } };
      }),
    );
    const served = answers.filter((answer) => answer.status === 200);
    const refused = answers.filter((answer) => answer.status !== 200);
    expect(served.length).toBeGreaterThan(0);
    expect(refused.length).toBeGreaterThan(0);
    for (const refusal of refused) expect(refusal).toMatchObject({ status: 429, body: { error: { code: "quota_exceeded" } } });
    const report = (await (await fetch(`${live[0]!.url}/api/v1.0/usage`, { headers: bearer(spender) })).json()) as UsageReport;
    expect(report.quota!.used).toBe(served.reduce((total, answer) => total + answer.body.usage.total_tokens, 0));
    expect(report.quota!.used).toBeLessThanOrEqual(limit);
    console.log(`quota across nodes: ${served.length} served, ${refused.length} refused, ${report.quota!.used} of ${limit} tokens used`);
  });

  test("two clients sending turns of one conversation to two nodes directly are serialized", async () => {
    const live = nodes.filter((node) => node.child.exitCode === null && node.child.signalCode === null);
    const [a, b] = [live[0]!, live[1]!];
    const conversation = "contended";
    const replies = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        fetch(`${(i % 2 === 0 ? a : b).url}/api/v1.0/chat`, {
          method: "POST",
          headers: { ...bearer(key), "content-type": "application/json" },
          body: JSON.stringify({ conversation_id: conversation, message: `race ${i}`, max_tokens: 48, temperature: 1 }),
        }).then(async (r) => ({ status: r.status, body: (await r.json()) as ChatReply })),
      ),
    );
    expect(replies.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    const listing = await fetch(`${a.url}/api/v1.0/chat/messages?conversation_id=${conversation}&sort_by=created_at:asc&rows_per_page=100`, {
      headers: bearer(key),
    });
    const roles = ((await listing.json()) as { data: { role: string }[] }).data.map((m) => m.role);
    // Never two user messages in a row: each turn's reply was stored before the next turn began.
    expect(roles).toEqual(Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? "user" : "assistant")));
    // Each turn saw every turn stored before it: the prompts are all different lengths.
    expect(new Set(replies.map((r) => r.body.usage.prompt_tokens)).size).toBe(6);
  });

  test("kept responses on every node: a response in a conversation lands where its native turns do; a background stream started on one node is resumed on another", async () => {
    const live = nodes.filter((node) => node.child.exitCode === null && node.child.signalCode === null);
    const v1 = (url: string, method: string, path: string, body?: unknown) =>
      fetch(`${url}/v1${path}`, {
        method,
        headers: { ...bearer(key), ...(body === undefined ? {} : { "content-type": "application/json" }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });

    // Through HAProxy: the native turn and the responses in its conversation share a node, and its cache.
    const native = await fetch(`${balancer.url}/api/v1.0/chat`, {
      method: "POST",
      headers: { ...bearer(key), "content-type": "application/json" },
      body: JSON.stringify({ conversation_id: "conv_cluster", message: "Hello", max_tokens: 8, temperature: 0 }),
    });
    expect(native.status).toBe(200);
    // The node already held everything the turn before evaluated: this conversation's cache.
    let before = ((await native.json()) as ChatReply).usage.prompt_tokens;
    for (const conversation of ["conv_cluster", { id: "conv_cluster" }]) {
      const response = await v1(balancer.url, "POST", "/responses", {
        model: "any",
        conversation,
        input: "Tell me more",
        max_output_tokens: 8,
        temperature: 0,
      });
      expect(response.status).toBe(200);
      const { usage } = (await response.json()) as { usage: { input_tokens: number; input_tokens_details: { cached_tokens: number } } };
      expect(usage.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(before);
      before = usage.input_tokens;
    }

    // A chain made on one node, continued on another: the reply it gets where it was made.
    const [first, second] = [live[0]!, live[1]!];
    const respond = async (url: string, input: string, previous?: string) =>
      (await (
        await v1(url, "POST", "/responses", {
          model: "any",
          input,
          temperature: 0,
          max_output_tokens: 8,
          ...(previous ? { previous_response_id: previous } : {}),
        })
      ).json()) as {
        id: string;
        output: { type: string; content?: { text: string }[] }[];
      };
    const textOf = (response: Awaited<ReturnType<typeof respond>>) => response.output.find((item) => item.type === "message")!.content![0]!.text;
    const opening = await respond(first.url, "Hello");
    const middle = await respond(first.url, "Tell me more", opening.id);
    expect(textOf(await respond(second.url, "Thanks", middle.id))).toBe(textOf(await respond(first.url, "Thanks", middle.id)));

    // Started on one node, left after its first delta, resumed on another from the kept events.
    const started = await v1(first.url, "POST", "/responses", {
      model: "any",
      input: "Hello there",
      background: true,
      stream: true,
      max_output_tokens: 24,
      temperature: 0,
    });
    expect(started.status).toBe(200);
    const seen: { sequence_number: number; type: string; delta?: string; response?: { id: string; output_text?: string } }[] = [];
    for await (const { event, data } of readSse(started)) {
      if (event === "comment") continue;
      seen.push(data as (typeof seen)[number]);
      if (seen.at(-1)!.type === "response.output_text.delta") break;
    }
    const id = seen[0]!.response!.id;
    const resumed = await v1(second.url, "GET", `/responses/${id}?stream=true&starting_after=${seen.at(-1)!.sequence_number}`);
    expect(resumed.status).toBe(200);
    for await (const { event, data } of readSse(resumed)) if (event !== "comment") seen.push(data as (typeof seen)[number]);
    expect(seen.map((event) => event.sequence_number)).toEqual(seen.map((_, i) => i));
    expect(["response.completed", "response.incomplete"]).toContain(seen.at(-1)!.type);
    const kept = (await (await v1(second.url, "GET", `/responses/${id}`)).json()) as { output: { type: string; content?: { text: string }[] }[] };
    const text = kept.output.find((item) => item.type === "message")!.content![0]!.text;
    expect(seen.flatMap((event) => (event.type === "response.output_text.delta" ? [event.delta!] : [])).join("")).toBe(text);
  });
});
