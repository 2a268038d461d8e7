/**
 * The operator's path through the single executable, end to end: copied alone into an empty
 * directory, run with only HOME and PATH, issue a key, serve, chat (streamed), list, stop with
 * SIGTERM, start again on the same data and find the history, then serve a second model dropped
 * into its models directory. It answers plain and streamed on the native and OpenAI APIs. An executable that carries its model (`--carried`) serves it with no
 * models directory, unpacked once into the data directory; another CPU's executable runs under its
 * emulator (qemu-user), as slowly as that is. Uses node:assert, not bun:test,
 * because it also runs as a plain script inside a network namespace with no network at all:
 * `bun test/build/scenario.ts <built executable> [--carried] [--arm64]`.
 */
import assert from "node:assert/strict";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { arm64Emulator, type Emulator, type Installed, installAlone, runCli } from "../support/binary";
import { bearer, postChat, postJson } from "../support/http";
import { type ChildServer, startServer } from "../support/process";

interface Message {
  role: string;
  content: string;
  conversation_id: string;
}

export interface ScenarioOptions {
  /** The executable carries the demo model (`bun run build --embed-model`). */
  carried?: boolean;
  emulator?: Emulator;
}

export async function binaryScenario(built: string, options: ScenarioOptions = {}): Promise<void> {
  const installed = installAlone(built, "e2e", options.emulator);
  const servers: ChildServer[] = [];
  try {
    await scenario(installed, servers, options);
  } finally {
    for (const server of servers) server.child.kill("SIGKILL");
    rmSync(installed.dir, { recursive: true, force: true });
  }
}

const unpacked = (server: ChildServer) => server.lines.some((line) => line.includes('"msg":"unpacked the models this executable carries'));

async function scenario(installed: Installed, servers: ChildServer[], { carried = false }: ScenarioOptions): Promise<void> {
  const created = runCli(installed, "keys", "create", "--user", "x");
  assert.equal(created.code, 0, created.stderr);
  const key = created.stdout.trim().split("\n").at(-1)!;
  assert.match(key, /^pk_/);

  const first = await startServer({ installed });
  servers.push(first);
  // Its natives are the ones it carries, whichever the build chose, and the log says so.
  const loaded = first.lines.find((line) => /"msg":"model loaded"/.test(line));
  assert.equal((JSON.parse(loaded ?? "{}") as { natives?: string }).natives, "embedded", loaded ?? "no model loaded line");
  if (carried) {
    // Served from the copy it unpacked; without it the demo would have been written into models/.
    const listening = JSON.parse(first.lines.find((line) => line.includes('"msg":"listening"')) ?? "{}") as { model_path?: string };
    assert.match(listening.model_path ?? "", /^data\/carried\/[0-9a-f]{64}\/[^/]+\.gguf$/);
    assert.ok(unpacked(first), "the first start says it unpacked its model");
    assert.equal(existsSync(join(installed.dir, "models")), false, "no models directory was needed");
  }
  const response = await postChat(first.url, key, { message: "hi", conversation_id: "c", stream: true });
  assert.equal(response.status, 200);
  assert.match(response.headers.get("content-type") ?? "", /^text\/event-stream/);
  const events = [...(await response.text()).matchAll(/^event: (\w+)$/gm)].map((match) => match[1]);
  assert.equal(events[0], "start");
  assert.equal(events.at(-1), "done", `events: ${events.join(",")}`);
  await openAiAnswers(first, key);

  const before = await listMessages(first, key);
  assert.deepEqual(
    before.map((m) => [m.role, m.conversation_id]),
    [
      ["assistant", "c"],
      ["user", "c"],
    ],
  );
  assert.equal(before[1]!.content, "hi");
  await stop(first);

  const second = await startServer({ installed });
  servers.push(second);
  assert.deepEqual(await listMessages(second, key), before);
  assert.equal(unpacked(second), false, "a later start uses the unpacked copy");

  // A model dropped into models/ while serving is listed and answers, loaded in place of the other.
  const wrote = runCli(installed, "model", "demo", "--preset", "llama3");
  assert.equal(wrote.code, 0, wrote.stderr);
  const listed = (await (await fetch(`${second.url}/v1/models`, { headers: bearer(key) })).json()) as { data: { id: string; loaded: boolean }[] };
  assert.deepEqual(
    listed.data.map((model) => [model.id, model.loaded]),
    [
      ["parley-demo", true],
      ["parley-llama3", false],
    ],
  );
  const other = await postChat(second.url, key, { message: "hi", conversation_id: "other", model: "parley-llama3", max_tokens: 4 });
  assert.equal(other.status, 200);
  assert.equal(((await other.json()) as { model: string }).model, "parley-llama3");
  await stop(second);
}

/** A chat completion, plain and then streamed, each with text. */
async function openAiAnswers(server: ChildServer, key: string): Promise<void> {
  const ask = { model: "parley", messages: [{ role: "user", content: "Hello there!" }], max_tokens: 8 };
  const plain = await postJson(server.url, key, "/v1/chat/completions", ask);
  assert.equal(plain.status, 200, plain.text);
  const [choice] = (JSON.parse(plain.text) as { choices: { message: { content: string } }[] }).choices;
  assert.match(choice?.message.content ?? "", /\w/);
  const streamed = await postJson(server.url, key, "/v1/chat/completions", { ...ask, stream: true });
  assert.equal(streamed.status, 200, streamed.text);
  const chunks = [...streamed.text.matchAll(/^data: (.*)$/gm)].map((match) => match[1]!);
  assert.equal(chunks.at(-1), "[DONE]");
  const text = chunks
    .slice(0, -1)
    .map((chunk) => (JSON.parse(chunk) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? "")
    .join("");
  assert.match(text, /\w/);
}

async function listMessages(server: ChildServer, key: string): Promise<Message[]> {
  const response = await fetch(`${server.url}/api/v1.0/chat/messages`, { headers: bearer(key) });
  assert.equal(response.status, 200);
  return ((await response.json()) as { data: Message[] }).data;
}

async function stop(server: ChildServer): Promise<void> {
  const code = await server.stop();
  assert.equal(code, 0, `exit ${code} after SIGTERM; output:\n${server.lines.join("\n")}`);
}

if (import.meta.main) {
  const emulator = Bun.argv.includes("--arm64") ? arm64Emulator() : undefined;
  if (emulator !== undefined && "missing" in emulator) throw new Error(emulator.missing);
  await binaryScenario(Bun.argv[2]!, { carried: Bun.argv.includes("--carried"), ...(emulator ? { emulator } : {}) });
  console.log("scenario passed");
}
