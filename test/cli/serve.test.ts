import { afterAll, describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { allowSlowTests, type ChildServer, postChat, presetModel, readSse, startServer, tempDir } from "../support";

allowSlowTests();

const dir = tempDir("serve");
const adminKey = "serve-test-admin-key-0123456789abcdef";
const env = {
  ...Bun.env,
  PARLEY_DB: join(dir, "data", "parley.db"),
  PARLEY_MODELS_DIR: join(dir, "models"),
  PARLEY_PORT: "0",
  PARLEY_ADMIN_KEY: adminKey,
  PARLEY_DATA_DIR: join(dir, "state"),
};

const started: ChildServer[] = [];
afterAll(() => {
  for (const server of started) server.child.kill("SIGKILL");
});

/** `parley serve` with no model configured, so it writes and uses the demo model in PARLEY_MODELS_DIR. */
async function start(): Promise<ChildServer> {
  const server = await startServer({
    dbPath: env.PARLEY_DB,
    adminKey,
    env: { PARLEY_MODEL: "", PARLEY_MODELS_DIR: env.PARLEY_MODELS_DIR, PARLEY_THREADS: "", PARLEY_DATA_DIR: env.PARLEY_DATA_DIR },
  });
  started.push(server);
  return server;
}

async function stop(server: ChildServer) {
  server.child.kill("SIGTERM");
  expect(await server.child.exited).toBe(0);
}

const chat = (server: ChildServer, body: Record<string, unknown>) => postChat(server.url, adminKey, body);

const wroteDemo = (line: string) => line.includes("wrote the built-in demo model");

let firstTurn = { prompt_tokens: 0, completion_tokens: 0 };

describe("parley serve", () => {
  test("first start: bootstraps the admin key, writes and uses the demo model, answers a stream", async () => {
    const server = await start();
    expect(existsSync(join(dir, "models", "parley-demo.gguf"))).toBe(true);
    expect(server.lines.some((line) => line.includes("demo model") && line.includes("PARLEY_MODEL"))).toBe(true);
    expect(server.lines.filter(wroteDemo).map((line) => JSON.parse(line))).toMatchObject([
      { level: "info", model_path: join(dir, "models", "parley-demo.gguf") },
    ]);
    expect(server.lines.some((line) => line.includes("PARLEY_ADMIN_KEY"))).toBe(true);
    expect(server.lines.join("\n")).not.toContain(adminKey);

    const response = await chat(server, { message: "Hello!", conversation_id: "kept", stream: true, temperature: 0 });
    const names: string[] = [];
    for await (const event of readSse(response)) {
      names.push(event.event);
      if (event.event === "done") firstTurn = (event.data as { usage: typeof firstTurn }).usage;
    }
    expect(names[0]).toBe("start");
    expect(names.at(-1)).toBe("done");
    await stop(server);
    // What is not the database lives in PARLEY_DATA_DIR: the chat-format cache, the KV states saved on stop.
    expect(existsSync(join(env.PARLEY_DATA_DIR, "chat-wrappers.json"))).toBe(true);
    expect(existsSync(join(env.PARLEY_DATA_DIR, "kv"))).toBe(true);
    expect(existsSync(join(dir, "data", "chat-wrappers.json"))).toBe(false);
  });

  test("a restart on the same data continues the conversation with its full history", async () => {
    const server = await start();
    expect(server.lines.some((line) => line.includes("First start"))).toBe(false);
    // The demo written by the first start is reused, and not announced again.
    expect(server.lines.filter(wroteDemo)).toEqual([]);
    const response = await chat(server, { message: "And now?", conversation_id: "kept", temperature: 0 });
    expect(response.status).toBe(200);
    const reply = (await response.json()) as { new_conversation: boolean; usage: { prompt_tokens: number } };
    expect(reply.new_conversation).toBe(false);
    // The prompt holds the first turn (question and reply), read back from the database.
    expect(reply.usage.prompt_tokens).toBeGreaterThan(firstTurn.prompt_tokens + firstTurn.completion_tokens);

    const listed = await fetch(`${server.url}/api/v1.0/chat/messages?conversation_id=kept&sort_by=id:asc`, {
      headers: { authorization: `Bearer ${adminKey}` },
    });
    const { data } = (await listed.json()) as { data: { role: string; content: string }[] };
    expect(data.map((message) => message.role)).toEqual(["user", "assistant", "user", "assistant"]);
    expect(data[0]!.content).toBe("Hello!");
    await stop(server);
  });
});

describe("parley serve with two files of one model id", () => {
  test("starts: the named file keeps the id, the other is served by its file name, and the log names both", async () => {
    const models = tempDir("same-id");
    const named = await presetModel("demo");
    const copy = join(models, "parley-demo-copy.gguf");
    await Bun.write(copy, Bun.file(named));
    const server = await startServer({ dbPath: join(models, "db", "parley.db"), adminKey, env: { PARLEY_MODEL: named, PARLEY_MODELS_DIR: models } });
    started.push(server);
    const warnings = server.lines.filter((line) => line.includes("two model files have the id"));
    expect(warnings.map((line) => JSON.parse(line))).toMatchObject([{ level: "warn", model_path: copy, id: "parley-demo-copy", other_path: named }]);
    const listed = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${adminKey}` } });
    const { data } = (await listed.json()) as { data: { id: string }[] };
    expect(data.map((model) => model.id)).toEqual(["parley-demo", "parley-demo-copy"]);
    const reply = await chat(server, { message: "Hello!", conversation_id: "copy", model: "parley-demo-copy", temperature: 0 });
    expect(reply.status).toBe(200);
    expect(((await reply.json()) as { model: string }).model).toBe("parley-demo-copy");
    await stop(server);
  });
});

describe("parley serve refuses an unusable model", () => {
  test("a truncated or non-GGUF file stops start-up with exit 1 and a one-line reason", async () => {
    const models = tempDir("bad-models");
    const demo = await Bun.file(await presetModel("demo")).arrayBuffer();
    const cases: [string, Uint8Array | string, RegExp][] = [
      ["truncated.gguf", new Uint8Array(demo.slice(0, demo.byteLength / 2)), /is truncated/],
      ["page.gguf", "<!DOCTYPE html><html>not a model</html>", /is not a GGUF file/],
    ];
    for (const [name, content, reason] of cases) {
      const path = join(models, name);
      await Bun.write(path, content);
      const result = Bun.spawnSync(["bun", "src/cli.ts", "serve"], {
        env: { ...env, PARLEY_MODEL: path, PARLEY_DB: join(models, "db", "parley.db") },
        stdout: "pipe",
        stderr: "pipe",
      });
      expect(result.exitCode).toBe(1);
      const stderr = result.stderr.toString().trim();
      expect(stderr.split("\n")).toHaveLength(1);
      expect(stderr).toMatch(reason);
      expect(stderr).toContain(path);
      expect(result.stdout.toString()).not.toContain('"msg":"listening"');
    }
  });
});

describe("parley serve with PARLEY_GPU=cuda where no GPU is usable", () => {
  test("says why in one warning, serves from the CPU, and the model's load line names the device", async () => {
    const server = await startServer({ dbPath: join(tempDir("gpu"), "parley.db"), adminKey, env: { PARLEY_GPU: "cuda" } });
    started.push(server);
    const warnings = server.lines.filter((line) => line.includes("no GPU is used"));
    expect(warnings).toHaveLength(1);
    expect(JSON.parse(warnings[0]!)).toMatchObject({
      level: "warn",
      msg: expect.stringMatching(/^no GPU is used, the models run on the CPU: PARLEY_GPU=cuda, but /),
    });
    const loaded = JSON.parse(server.lines.find((line) => line.includes('"msg":"model loaded"'))!) as Record<string, unknown>;
    expect(loaded).toMatchObject({ device: "cpu" });
    expect(loaded.gpu_layers).toBeUndefined();
    const response = await chat(server, { message: "hi", conversation_id: "gpu", max_tokens: 4 });
    expect(response.status).toBe(200);
    await stop(server);
  });
});
