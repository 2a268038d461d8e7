/**
 * The operator's path through the single executable, end to end: copied alone into an empty
 * directory, run with only HOME and PATH, issue a key, serve, chat (streamed), list, stop with
 * SIGTERM, start again on the same data and find the history. Uses node:assert, not bun:test,
 * because it also runs as a plain script inside a network namespace with no network at all:
 * `bun test/build/scenario.ts <built executable>`.
 */
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { type Installed, installAlone, runCli, startServe, type Serving } from "../../src/build/run-binary";

interface Message {
  role: string;
  content: string;
  conversation_id: string;
}

export async function binaryScenario(built: string): Promise<void> {
  const installed = installAlone(built, "e2e");
  const servers: Serving[] = [];
  try {
    await scenario(installed, servers);
  } finally {
    for (const server of servers) server.process.kill("SIGKILL");
    rmSync(installed.dir, { recursive: true, force: true });
  }
}

async function scenario(installed: Installed, servers: Serving[]): Promise<void> {
  const created = runCli(installed, "keys", "create", "--user", "x");
  assert.equal(created.code, 0, created.stderr);
  const key = created.stdout.trim().split("\n").at(-1)!;
  assert.match(key, /^pk_/);
  const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };

  const first = await startServe(installed);
  servers.push(first);
  const response = await fetch(`${first.url}/api/v1.0/chat`, {
    method: "POST",
    headers,
    body: JSON.stringify({ message: "hi", conversation_id: "c", stream: true }),
  });
  assert.equal(response.status, 200);
  assert.match(response.headers.get("content-type") ?? "", /^text\/event-stream/);
  const events = [...(await response.text()).matchAll(/^event: (\w+)$/gm)].map((match) => match[1]);
  assert.equal(events[0], "start");
  assert.equal(events.at(-1), "done", `events: ${events.join(",")}`);

  const before = await listMessages(first, headers);
  assert.deepEqual(before.map((m) => [m.role, m.conversation_id]), [["assistant", "c"], ["user", "c"]]);
  assert.equal(before[1]!.content, "hi");
  await stop(first);

  const second = await startServe(installed);
  servers.push(second);
  assert.deepEqual(await listMessages(second, headers), before);
  await stop(second);
}

async function listMessages(server: Serving, headers: Record<string, string>): Promise<Message[]> {
  const response = await fetch(`${server.url}/api/v1.0/chat/messages`, { headers });
  assert.equal(response.status, 200);
  return ((await response.json()) as { data: Message[] }).data;
}

async function stop(server: Serving): Promise<void> {
  server.process.kill("SIGTERM");
  const code = await server.process.exited;
  assert.equal(code, 0, `exit ${code} after SIGTERM; stderr:\n${await new Response(server.process.stderr).text()}`);
}

if (import.meta.main) {
  await binaryScenario(Bun.argv[2]!);
  console.log("scenario passed");
}
