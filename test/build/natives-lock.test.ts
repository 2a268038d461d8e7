/**
 * The compiled-natives cache's build lock and cleanup, through `bun run natives` on a temporary
 * cache (XDG_CACHE_HOME) whose build is a stand-in file: nothing is compiled, so a run that
 * compiled would fail on the missing tools' time, not pass.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { buildLockHolder, withBuildLock } from "../../src/natives/build-lock";
import { compiledNativesDir, PLATFORM_FOLDER } from "../../src/natives/compiled";
import { NODE_LLAMA_CPP_VERSION } from "../../src/natives/version";
import { allowSlowTests, eachLine, tempDir, until } from "../support";

allowSlowTests();

const ROOT = join(import.meta.dir, "../..");

/** A temporary cache, and where this recipe's build goes in it. */
function cache() {
  const xdg = tempDir("natives-cache");
  const binsDir = compiledNativesDir(NODE_LLAMA_CPP_VERSION, { XDG_CACHE_HOME: xdg });
  return { xdg, binsDir, root: dirname(binsDir) };
}

/** Stands in for a finished build: all that `bun run natives` looks for. */
function fakeBuild(binsDir: string): void {
  mkdirSync(join(binsDir, PLATFORM_FOLDER), { recursive: true });
  writeFileSync(join(binsDir, PLATFORM_FOLDER, "llama-addon.node"), "stand-in");
}

function natives(xdg: string) {
  const lines: string[] = [];
  const child = Bun.spawn(["bun", "run", "tools/natives.ts"], { cwd: ROOT, env: { ...Bun.env, XDG_CACHE_HOME: xdg }, stdout: "pipe", stderr: "pipe" });
  const read = (stream: ReadableStream<Uint8Array>) => eachLine(stream, (line) => lines.push(line));
  const done = Promise.all([read(child.stdout), read(child.stderr)]).then(() => child.exited);
  return { lines, done };
}

describe("the compiled-natives cache", () => {
  test("a second build waits for the lock's holder, then uses what it built instead of compiling again", async () => {
    const { xdg, binsDir, root } = cache();
    let run: ReturnType<typeof natives> | undefined;
    await withBuildLock(root, async () => {
      expect(buildLockHolder(root)).toBe(process.pid);
      run = natives(xdg);
      await until(() => run!.lines.some((line) => line.includes(`another build (pid ${process.pid})`)), "the second build to wait", 20_000);
      fakeBuild(binsDir);
    });
    expect(await run!.done).toBe(0);
    expect(run!.lines.at(-1)).toBe(`natives: already built in ${binsDir}`);
    expect(buildLockHolder(root)).toBeUndefined();
  });

  test("a lock whose holder is gone is taken over", async () => {
    const { xdg, binsDir, root } = cache();
    const gone = Bun.spawn(["true"]);
    await gone.exited;
    mkdirSync(join(root, "build.lock"), { recursive: true });
    writeFileSync(join(root, "build.lock", "pid"), String(gone.pid));
    fakeBuild(binsDir);
    const run = natives(xdg);
    expect(await run.done).toBe(0);
    expect(run.lines.some((line) => line.includes("waiting"))).toBe(false);
    expect(existsSync(join(root, "build.lock"))).toBe(false);
  });

  test("other recipes' builds of this node-llama-cpp version are removed; other versions' stay", async () => {
    const { xdg, binsDir, root } = cache();
    fakeBuild(binsDir);
    const others = [`${NODE_LLAMA_CPP_VERSION}-0000000000000000`, `${NODE_LLAMA_CPP_VERSION}-1111111111111111`];
    for (const name of others) fakeBuild(join(root, name));
    fakeBuild(join(root, "3.0.0-2222222222222222"));
    const run = natives(xdg);
    expect(await run.done).toBe(0);
    expect(readdirSync(root).sort()).toEqual(["3.0.0-2222222222222222", binsDir.slice(root.length + 1)].sort());
    for (const name of others) expect(run.lines).toContain(`natives: removed another recipe's build, ${name}`);
  });
});
