/**
 * docs/API.md's shell examples, run as written against a fresh server, in the document's order (a
 * conversation the first example starts is the one a later one deletes). Only the variables the
 * document says to set are filled in: `PARLEY` with the server's URL, `KEY` with a user's key,
 * `ADMIN_KEY` with an admin's, `USER_ID` with that user's id, `MCP_URL` with the URL of the MCP
 * server listed as `web` (the tests' streamable-HTTP one, in a process of its own; `tools` is their
 * stdio one). Each must succeed with a 2xx, so an
 * example that no longer works fails CI. The pictures' examples ask the vision preset, which sees
 * only on Parley's compiled natives: without them (never under CI, which compiles them) each must
 * answer the documented refusal instead, naming `bun run natives`. The contents at the top must be
 * the headings' own.
 */
import { afterAll, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { VISION_MODEL_NAME } from "../../src/gguf/presets";
import { API_DOC, withContents } from "../../tools/api-contents";
import { allowSlowTests, type ChildServer, compiledNatives, presetModel, shellCommands, startServer, tempDir } from "../support";
import { MCP_STDIO_COMMAND, mcpHttpProcess } from "../support/mcp";
import { visionPair } from "../support/vision";

allowSlowTests();

const ROOT = join(import.meta.dir, "../..");
const ADMIN_KEY = "api-examples-admin-key-0123456789abcdef";
const doc = readFileSync(API_DOC, "utf8");

/** Each sh block's commands but the `export` lines, whose variables this test fills in. */
const examples = Array.from(doc.matchAll(/```sh\n([\s\S]*?)```/g), (match) => shellCommands(match[1]!))
  .flat()
  .filter((command) => !command.startsWith("export "));

/** The examples that send a picture: one per protocol, each asking the vision preset. */
const asksAboutPicture = (command: string) => new RegExp(`"model":\\s*"${VISION_MODEL_NAME}"`).test(command);
const natives = await compiledNatives();

let server: ChildServer | undefined;
// In a process of its own: the examples run with spawnSync, which blocks this one.
const web = await mcpHttpProcess();
afterAll(async () => {
  await server?.stop();
  await web.stop();
});

test("the table of contents is the headings' (bun run docs writes it)", () => {
  expect(doc).toBe(withContents(doc));
});

test("every shell example of docs/API.md answers 2xx as written", async () => {
  expect(examples.filter((command) => command.startsWith("curl ")).length).toBeGreaterThanOrEqual(10);
  const pictureRoutes = examples.filter(asksAboutPicture).map((command) => /\$PARLEY(\S*?)"? /.exec(command)?.[1]);
  expect(pictureRoutes).toEqual(["/api/v1.0/chat", "/v1/chat/completions", "/v1/responses", "/v1/messages", "/api/chat"]);
  const dbPath = join(tempDir("api-examples"), "parley.db");
  // The retrieval models beside the demo, for the embeddings and reranking examples, the vision
  // preset (its projector beside it) for the pictures', and a model that fills in the middle for /infill's.
  const models = [
    await presetModel("demo"),
    await presetModel("embed"),
    await presetModel("rerank"),
    (await visionPair()).model,
    await presetModel("qwen2-coder"),
  ];
  // The MCP servers the tools' examples name: the tests' stdio one, which Parley starts, and their HTTP one.
  const mcpServers = join(tempDir("api-examples-mcp"), "mcp.json");
  writeFileSync(mcpServers, JSON.stringify({ tools: MCP_STDIO_COMMAND, web: { url: web.url } }));
  server = await startServer({ dbPath, adminKey: ADMIN_KEY, env: { PARLEY_MODEL: models.join(","), PARLEY_MCP_SERVERS: `@${mcpServers}` } });
  const cli = (...args: string[]) =>
    Bun.spawnSync(["bun", "src/cli.ts", ...args], { cwd: ROOT, env: { ...Bun.env, PARLEY_DB: dbPath }, stdout: "pipe", stderr: "pipe" });
  const key = cli("keys", "create", "--user", "alice").stdout.toString().trim().split("\n").at(-1)!;
  const alice = cli("keys", "list")
    .stdout.toString()
    .split("\n")
    .find((line) => line.split("\t")[1] === "alice")!;
  const env = { ...(Bun.env as Record<string, string>), PARLEY: server.url, KEY: key, ADMIN_KEY, USER_ID: alice.split("\t")[2]!, MCP_URL: web.url };
  for (const command of examples) {
    // The status on a line of its own after the body: curl's -w, unless the example writes its own.
    const run = Bun.spawnSync(["bash", "-c", command.includes(" -w ") ? command : `${command} -w '\\n%{http_code}'`], {
      cwd: ROOT,
      env,
      stdout: "pipe",
      stderr: "pipe",
    });
    const out = run.stdout.toString().trimEnd();
    expect(run.exitCode, `${command}\n${run.stderr}`).toBe(0);
    if (natives === undefined && asksAboutPicture(command)) {
      expect(out.split("\n").at(-1), `${command}\n${out.slice(0, 500)}`).toMatch(/^(400|422)$/);
      expect(out).toContain("bun run natives");
      continue;
    }
    expect(out.split("\n").at(-1), `${command}\n${out.slice(0, 500)}`).toMatch(/^2\d\d$/);
    if (command.includes('"stream":true')) expect(out).toContain("event: done");
  }
}, 60_000);
