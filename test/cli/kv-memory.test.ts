/**
 * Saved KV states in memory (`PARLEY_KV_RAM_MB`, on by default) in the served process: a
 * conversation's state waits in memory while its sequence serves another, reaches its file only at
 * a clean stop, and warms the conversation's next turn after the restart.
 */
import { afterAll, expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { allowSlowTests, bearer, type ChildServer, postChat, startServer, tempDir } from "../support";

allowSlowTests();

const adminKey = "kv-memory-test-admin-key-0123456789abcdef";
const started: ChildServer[] = [];
afterAll(() => {
  for (const server of started) server.child.kill("SIGKILL");
});

const dbPath = join(tempDir("kv-memory"), "parley.db");
const stateFiles = () => readdirSync(join(dirname(dbPath), "kv"), { recursive: true, encoding: "utf8" }).filter((path) => path.endsWith(".kv"));

async function start(): Promise<ChildServer> {
  const server = await startServer({ dbPath, adminKey, env: { PARLEY_PARALLEL: "1" } });
  started.push(server);
  return server;
}

async function metric(server: ChildServer, pattern: RegExp): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`, { headers: bearer(adminKey) })).text();
  return Number(pattern.exec(text)?.[1]);
}

async function chat(server: ChildServer, conversation: string, message: string): Promise<void> {
  const response = await postChat(server.url, adminKey, { message, conversation_id: conversation, max_tokens: 16 });
  expect(response.status).toBe(200);
}

test("a state waits in memory, not on disk; a clean stop writes it, and the restarted server continues from it", async () => {
  const first = await start();
  await chat(first, "a", "hello there, how are you today");
  await chat(first, "b", "something else entirely"); // takes the only sequence: a's state is saved
  expect(await metric(first, /^parley_kv_memory_bytes (\d+)$/m)).toBeGreaterThan(0);
  expect(stateFiles()).toEqual([]);
  first.child.kill("SIGTERM");
  expect(await first.child.exited).toBe(0);
  expect(stateFiles()).toHaveLength(2);

  const second = await start();
  expect(await metric(second, /^parley_kv_memory_bytes (\d+)$/m)).toBe(0);
  await chat(second, "a", "and now?");
  expect(await metric(second, /^parley_prompt_tokens_total\{source="cached"\} (\d+)$/m)).toBeGreaterThan(10);
});
