/**
 * The README's "Keys and a first conversation" commands, run as written against a fresh server,
 * in order, from the checkout. Two things differ from a reader's terminal: the server listens on a
 * free port instead of 8080 (its URL replaces `http://127.0.0.1:8080`), and `export KEY=pk_...`
 * takes the key the command before it printed. Each command must succeed and do what its comment
 * says, the revoked key being the throwaway one, not alice's.
 */
import { afterAll, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { allowSlowTests, type ChildServer, shellCommands, startServer, tempDir } from "../support";

allowSlowTests();

const ROOT = join(import.meta.dir, "../..");
const ADMIN_KEY = "readme-test-admin-key-0123456789abcdef";

/** The commands of the sh block under `heading`. */
function commandsUnder(heading: string): string[] {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf(heading));
  return shellCommands(/```sh\n([\s\S]*?)```/.exec(section)![1]!);
}

let server: ChildServer | undefined;
afterAll(() => server?.stop());

test("the README's first conversation runs as written: a key, a chat, a stream, the listing, and a throwaway key revoked", async () => {
  const dbPath = join(tempDir("readme"), "parley.db");
  server = await startServer({ dbPath, adminKey: ADMIN_KEY });
  const env: Record<string, string> = { ...(Bun.env as Record<string, string>), PARLEY_DB: dbPath };
  const outputs: string[] = [];
  let printedKey = "";
  for (const command of commandsUnder("## Keys and a first conversation")) {
    if (command.startsWith("export KEY=")) {
      env.KEY = printedKey;
      continue;
    }
    const run = Bun.spawnSync(["bash", "-c", command.replaceAll("http://127.0.0.1:8080", server.url)], { cwd: ROOT, env, stdout: "pipe", stderr: "pipe" });
    expect(run.exitCode, `${command}\n${run.stderr}`).toBe(0);
    const out = run.stdout.toString();
    outputs.push(out);
    if (command.includes("keys create")) printedKey = out.trim().split("\n").at(-1)!;
  }
  const [created, chat, stream, listing, keys, throwaway] = outputs;
  expect(created!.trim().split("\n").at(-1)).toMatch(/^pk_/);
  expect(JSON.parse(chat!)).toMatchObject({ conversation_id: "first", message: { role: "assistant" } });
  expect(stream).toContain("event: done");
  expect((JSON.parse(listing!) as { data: unknown[] }).data).toHaveLength(4);
  expect(keys!.trim().split("\n")).toHaveLength(3);
  // The revoke took the throwaway key (id 3), not alice's, which the next section goes on using.
  const status = async (key: string) => (await fetch(`${server!.url}/api/v1.0/chat/messages`, { headers: { authorization: `Bearer ${key}` } })).status;
  expect(await status(throwaway!.trim().split("\n").at(-1)!)).toBe(401);
  expect(await status(env.KEY!)).toBe(200);
}, 60_000);
