import { afterAll, describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { presetModel, readSse, tempDir } from "../support";

const dir = tempDir("serve");
const adminKey = "serve-test-admin-key-0123456789abcdef";
const env = {
  ...Bun.env,
  PARLEY_DB: join(dir, "data", "parley.db"),
  PARLEY_MODELS_DIR: join(dir, "models"),
  PARLEY_PORT: "0",
  PARLEY_ADMIN_KEY: adminKey,
};

interface Running {
  url: string;
  output: string[];
  process: Bun.Subprocess<"ignore", "pipe", "pipe">;
}
const started: Running[] = [];
afterAll(() => {
  for (const server of started) server.process.kill("SIGKILL");
});

/** Starts `parley serve` as its own process and waits until /readyz says it can chat. */
async function start(): Promise<Running> {
  const process = Bun.spawn(["bun", "src/cli.ts", "serve"], { env, stdout: "pipe", stderr: "pipe" });
  const output: string[] = [];
  const running = { url: "", output, process };
  started.push(running);
  void (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of process.stdout) output.push(...decoder.decode(chunk).split("\n").filter(Boolean));
  })();
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    const listening = output.map((line) => line.startsWith("{") && (JSON.parse(line) as { msg: string; url?: string })).find((line) => line && line.msg === "listening");
    if (listening && listening.url) {
      running.url = listening.url;
      if ((await fetch(`${running.url}/readyz`)).status === 200) return running;
    }
    await Bun.sleep(50);
  }
  throw new Error(`parley serve did not become ready:\n${output.join("\n")}\n${await new Response(process.stderr).text()}`);
}

async function stop(server: Running) {
  server.process.kill("SIGTERM");
  expect(await server.process.exited).toBe(0);
}

const chat = (server: Running, body: Record<string, unknown>) =>
  fetch(`${server.url}/api/v1.0/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });

let firstTurn = { prompt_tokens: 0, completion_tokens: 0 };

describe("parley serve", () => {
  test("first start: bootstraps the admin key, writes and uses the demo model, answers a stream", async () => {
    const server = await start();
    expect(existsSync(join(dir, "models", "parley-demo.gguf"))).toBe(true);
    expect(server.output.some((line) => line.includes("demo model") && line.includes("PARLEY_MODEL"))).toBe(true);
    expect(server.output.some((line) => line.includes("PARLEY_ADMIN_KEY"))).toBe(true);
    expect(server.output.join("\n")).not.toContain(adminKey);

    const response = await chat(server, { message: "Hello!", conversation_id: "kept", stream: true, temperature: 0 });
    const names: string[] = [];
    for await (const event of readSse(response)) {
      names.push(event.event);
      if (event.event === "done") firstTurn = (event.data as { usage: typeof firstTurn }).usage;
    }
    expect(names[0]).toBe("start");
    expect(names.at(-1)).toBe("done");
    await stop(server);
  });

  test("a restart on the same data continues the conversation with its full history", async () => {
    const server = await start();
    expect(server.output.some((line) => line.includes("First start"))).toBe(false);
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
