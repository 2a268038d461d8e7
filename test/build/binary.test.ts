/**
 * Builds the single executable once (into /tmp, not dist/) and proves it runs alone. The slowest
 * test file: ~10 s with the natives archive cached in node_modules/.cache/parley, ~15 s more when
 * it must be compressed first (a fresh clone, as in CI). It embeds the npm prebuilt natives
 * (`--prebuilt-natives`): the default build would compile the fast ones first (minutes) on a
 * machine without them cached, and the packing and unpacking tested here are the same for both.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, utimesSync } from "node:fs";
import { dirname, join } from "node:path";
import { allowSlowTests } from "../support";
import { installAlone, runCli } from "../support/binary";
import pkg from "../../package.json";
import { binaryScenario } from "./scenario";

allowSlowTests();

const built = join(mkdtempSync("/tmp/parley-build-"), "parley");
/** Each holds a ~120 MB copy of the executable. */
const installs: string[] = [];
const install = (label: string) => {
  const installed = installAlone(built, label);
  installs.push(installed.dir);
  return installed;
};
afterAll(() => {
  for (const dir of [dirname(built), ...installs]) rmSync(dir, { recursive: true, force: true });
});

beforeAll(() => {
  const result = Bun.spawnSync([process.execPath, "run", join(import.meta.dir, "../../src/build/build.ts"), "--prebuilt-natives", "--outfile", built], { stdout: "pipe", stderr: "pipe" });
  if (result.exitCode !== 0) throw new Error(`build failed:\n${result.stdout}\n${result.stderr}`);
}, 120_000);

describe("the single executable", () => {
  test("serves, chats, stops on SIGTERM and keeps history across a restart, alone and with env -i", async () => {
    await binaryScenario(built);
  }, 60_000);

  test("carries the whole CLI and ignores .env and bunfig.toml in its directory", async () => {
    const installed = install("cli");
    await Bun.write(join(installed.dir, ".env"), "PARLEY_DB=./from-dotenv.db\n");
    await Bun.write(join(installed.dir, "bunfig.toml"), 'preload = ["./missing-preload.ts"]\n');

    const version = runCli(installed, "--version");
    expect(version.code).toBe(0);
    expect(version.stdout).toMatch(new RegExp(`^parley ${pkg.version} \\(node-llama-cpp \\d+\\.\\d+\\.\\d+, llama\\.cpp \\S+ from \\S+\\)`));
    const help = runCli(installed, "--help");
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("parley keys create");
    expect(runCli(installed, "model", "demo", "--out", "demo.gguf").code).toBe(0);
    expect(existsSync(join(installed.dir, "demo.gguf"))).toBe(true);
    expect(runCli(installed, "keys", "list").code).toBe(0);
    expect(existsSync(join(installed.dir, "data", "parley.db"))).toBe(true);
    expect(existsSync(join(installed.dir, "from-dotenv.db"))).toBe(false);
  });

  test("two first starts at once unpack the natives once, and old builds' copies are removed", async () => {
    const installed = install("natives");
    const root = join(installed.dir, "natives");
    mkdirSync(join(root, "3.0.0-0123456789abcdef", "linux-x64"), { recursive: true });
    mkdirSync(join(root, ".tmp-died"));
    const old = new Date(Date.now() - 3600_000);
    utimesSync(join(root, ".tmp-died"), old, old);
    mkdirSync(join(root, "not-ours"));

    const env = { ...installed.env, PARLEY_NATIVES_DIR: root };
    const both = [0, 1].map(() => Bun.spawn([installed.binary, "--version"], { cwd: installed.dir, env, stdout: "pipe", stderr: "pipe" }));
    for (const proc of both) {
      expect(await proc.exited).toBe(0);
      expect(await new Response(proc.stdout).text()).not.toContain("unknown");
    }
    const entries = readdirSync(root).sort();
    expect(entries).toHaveLength(2);
    expect(entries[0]).toMatch(/^\d+\.\d+\.\d+-[0-9a-f]{16}$/);
    expect(entries[1]).toBe("not-ours");
    expect(readdirSync(join(root, entries[0]!, "linux-x64"))).toContain("llama-addon.node");
  });

  test("works with no network at all (unshare -n)", async () => {
    const ip = Bun.which("ip", { PATH: "/usr/sbin:/sbin:/usr/bin:/bin" });
    const unshare = Bun.which("unshare");
    const reason =
      process.getuid?.() !== 0
        ? "not running as root"
        : unshare === null || ip === null
          ? "no unshare or ip command"
          : Bun.spawnSync([unshare, "-n", "true"]).exitCode !== 0
            ? "unshare -n is not permitted here (a container without CAP_SYS_ADMIN?)"
            : undefined;
    if (reason !== undefined) {
      console.log(`skipped the no-network run: ${reason}`);
      return;
    }
    // The client runs inside the namespace too: nothing outside can reach a server in it.
    const script = join(import.meta.dir, "scenario.ts");
    const proc = Bun.spawn([unshare!, "-n", "--", "sh", "-c", `"${ip}" link set lo up && exec "$0" "$@"`, process.execPath, script, built], {
      stdout: "pipe",
      stderr: "pipe",
    });
    const [code, stdout, stderr] = await Promise.all([proc.exited, new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
    expect(code, `${stdout}\n${stderr}`).toBe(0);
    expect(stdout).toContain("scenario passed");
  }, 60_000);
});
