import { afterAll, describe, expect, test } from "bun:test";
import { readdirSync, rmSync, statSync } from "node:fs";
import { statfs } from "node:fs/promises";
import { join } from "node:path";
import { Engine, type GenerateResult, type Turn } from "../../src/llm/engine";
import { allowSlowTests, type ChildServer, presetModel, startServer, systemTests, tempDir } from "../support";

allowSlowTests();

/*
 * Saved KV states live next to the database. On a small filesystem they once grew until SQLite
 * could not write a message, and every chat answered 500, even after a restart. The cache is
 * optional: on a short disk it gives space back and stops saving, and a save the disk cannot
 * hold costs a warning, never a chat. Each test has its own small tmpfs: mounting one changes the
 * machine, so these run only with PARLEY_SYSTEM_TESTS=1 (system-tests.ts), as root.
 */

const mounts: string[] = [];

/** A tmpfs of each size, in temp directories. */
function mountSmallFilesystems(...sizes: number[]): string[] {
  for (const bytes of sizes) {
    const dir = tempDir("kv-fs");
    const mount = Bun.spawnSync(["mount", "-t", "tmpfs", "-o", `size=${bytes}`, "tmpfs", dir], { stderr: "pipe" });
    if (mount.exitCode !== 0) throw new Error(`mount -t tmpfs failed: ${mount.stderr.toString().trim()}`);
    mounts.push(dir);
  }
  return mounts;
}

const TINY_FS = 3 * 2 ** 20;
const SMALL_FS = 8 * 2 ** 20;
const skipped = systemTests("the small-filesystem KV tests", () => (process.getuid?.() !== 0 ? "mounting a tmpfs needs root" : undefined));
const [tinyFs, smallFs] = skipped === undefined ? mountSmallFilesystems(TINY_FS, SMALL_FS) : [];

let server: ChildServer | undefined;

afterAll(async () => {
  if (server) {
    server.child.kill("SIGTERM");
    await server.child.exited;
  }
  for (const dir of mounts) {
    Bun.spawnSync(["umount", dir]);
    rmSync(dir, { recursive: true, force: true });
  }
});

const filesUnder = (dir: string) =>
  readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name));
const bytesUnder = (dir: string) => filesUnder(dir).reduce((sum, path) => sum + statSync(path).size, 0);

/** A message of about 22 tokens per line for the demo model, distinct per conversation. */
const longMessage = (lines: number, tag: string) => Array.from({ length: lines }, (_, line) => `line ${line} of conversation ${tag}`).join("\n");

describe("saved KV states on a small filesystem", () => {
  test.skipIf(skipped !== undefined)("a save the disk cannot hold is dropped whole, with a warning, and the turn goes on", async () => {
    const kvDir = join(tinyFs!, "kv");
    const warnings: string[] = [];
    await using engine = await Engine.load({
      modelPath: await presetModel("demo"),
      contextSize: 4096,
      parallel: 1,
      threads: 1,
      kvCache: { dir: kvDir, maxBytes: 2 ** 30 },
      onWarning: (message) => void warnings.push(message),
    });
    const reply = async (key: string, history: Turn[]): Promise<GenerateResult> => {
      const generation = engine.generate({ conversationKey: key, cacheScope: "test", history, temperature: 0, maxTokens: 16 });
      for (let step = await generation.next(); ; step = await generation.next()) if (step.done) return step.value;
    };
    // Over 3 MB of state: no save has measured a state yet, so this one is tried, and fails.
    const big = await reply("big", [{ role: "user", content: longMessage(150, "big") }]);
    expect(big.promptTokens).toBeGreaterThan(2900);
    const hi: Turn = { role: "user", content: "hi" };
    const small = await reply("small", [hi]);
    expect(small.finishReason).not.toBe("cancelled");
    expect(warnings).toEqual([expect.stringContaining("could not save")]);
    expect(filesUnder(kvDir)).toEqual([]);
    // The cache still works for states that fit.
    await reply("other", [{ role: "user", content: "something else" }]);
    const back = await reply("small", [hi, { role: "assistant", content: small.text }, { role: "user", content: "again" }]);
    expect(back.cachedTokens).toBeGreaterThan(small.promptTokens);
  });

  test.skipIf(skipped !== undefined)(
    "with the database beside it, every chat is answered and the cache keeps a margin",
    async () => {
      const CONVERSATIONS = 24;
      const ADMIN_KEY = "kv-disk-space-admin-key-0123456789abcdef";
      const dir = smallFs!;
      // One sequence: each new conversation pushes the last one's state to disk.
      server = await startServer({
        dbPath: join(dir, "parley.db"),
        adminKey: ADMIN_KEY,
        env: { PARLEY_PARALLEL: "1", PARLEY_RATE_LIMIT: "0", PARLEY_CONTEXT_SIZE: "2048" },
      });
      const chat = async (conversation_id: string, message: string) => {
        const response = await fetch(`${server!.url}/api/v1.0/chat`, {
          method: "POST",
          headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
          body: JSON.stringify({ conversation_id, message, temperature: 0, max_tokens: 16 }),
        });
        const body = await response.text();
        expect(response.status, `${conversation_id}: ${body}\n${server!.lines.slice(-5).join("\n")}`).toBe(200);
        const reply = JSON.parse(body) as { message: { finish_reason: string }; usage: { prompt_tokens: number; cached_tokens: number } };
        expect(["stop", "length"]).toContain(reply.message.finish_reason);
        return reply;
      };
      let restored = 0;
      let leastFree = SMALL_FS;
      let peakKv = 0;
      for (let i = 0; i < CONVERSATIONS; i++) {
        // About 1.1 MB of state each.
        const first = await chat(`c${i}`, longMessage(50, `c${i}`));
        expect(first.usage.prompt_tokens).toBeGreaterThan(850);
        if (i > 0) {
          // Back from disk: all but its new message is cached.
          const back = await chat(`c${i - 1}`, "and once more");
          if (back.usage.cached_tokens >= first.usage.prompt_tokens) restored++;
          // On an empty filesystem the first state fits.
          if (i === 1) expect(restored).toBe(1);
        }
        const { bavail, bsize } = await statfs(dir);
        leastFree = Math.min(leastFree, bavail * bsize);
        peakKv = Math.max(peakKv, bytesUnder(join(dir, "kv")));
      }
      // The states written add up to several times the filesystem: the cache gave space back (to
      // the database too, which grows into it) and kept a margin, yet most returns were cached.
      expect(leastFree).toBeGreaterThan(2 ** 20);
      expect(peakKv).toBeLessThan(SMALL_FS - 2 * 2 ** 20);
      expect(restored).toBeGreaterThan(CONVERSATIONS / 2);
    },
    60_000,
  );
});
