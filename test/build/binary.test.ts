/**
 * Builds the single executable once (into /tmp, not dist/) and proves it runs alone. The slowest
 * test file: ~10 s with the natives archive cached in node_modules/.cache/parley, ~15 s more when
 * it must be compressed first (a fresh clone, as in CI). It embeds the npm prebuilt natives
 * (`--prebuilt-natives`): the default build would compile the fast ones first (minutes) on a
 * machine without them cached, and the packing and unpacking tested here are the same for both.
 * The ARM64 executable's run under qemu-user adds about a minute (skipped without qemu).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, utimesSync } from "node:fs";
import { dirname, join } from "node:path";
import pkg from "../../package.json";
import { FAMILIES, type FamilyPreset } from "../../src/gguf/families";
import { writePresetModel } from "../../src/gguf/presets";
import type { ChatReply } from "../../src/http/contract";
import { allowSlowTests } from "../support";
import { arm64Emulator, installAlone, runCli } from "../support/binary";
import { postChat } from "../support/http";
import { startServer } from "../support/process";
import { readSse, type SseEvent } from "../support/sse";
import { systemTests } from "../support/system-tests";
import { binaryScenario } from "./scenario";

allowSlowTests();

const built = join(mkdtempSync("/tmp/parley-build-"), "parley");
/** Each holds a ~120 MB copy of the executable. */
const installs: string[] = [];
const install = (label: string, executable = built) => {
  const installed = installAlone(executable, label);
  installs.push(installed.dir);
  return installed;
};
afterAll(() => {
  for (const dir of [dirname(built), ...installs]) rmSync(dir, { recursive: true, force: true });
});

/** Builds the executable at `outfile`; returns what the build printed. */
function build(outfile: string, ...args: string[]): string {
  const result = Bun.spawnSync(
    [process.execPath, "run", join(import.meta.dir, "../../src/build/build.ts"), "--prebuilt-natives", "--outfile", outfile, ...args],
    {
      stdout: "pipe",
      stderr: "pipe",
    },
  );
  if (result.exitCode !== 0) throw new Error(`build failed:\n${result.stdout}\n${result.stderr}`);
  return result.stdout.toString();
}

/** The demo model as a file, for the executables that carry it. */
const demoModel = join(dirname(built), "parley-demo.gguf");

beforeAll(async () => {
  build(built);
  await writePresetModel("demo", demoModel);
}, 120_000);

describe("the single executable", () => {
  test("serves, chats, stops on SIGTERM and keeps history across a restart, alone and with env -i", async () => {
    await binaryScenario(built);
  }, 60_000);

  test("built with --embed-model, serves the model it carries from a clean directory with a fresh HOME and no models; model embedded shows its sha256", async () => {
    const sha256 = new Bun.CryptoHasher("sha256").update(await Bun.file(demoModel).bytes()).digest("hex");
    const carrying = join(dirname(built), "parley-carrying");
    expect(build(carrying, "--embed-model", demoModel)).toContain("carries parley-demo (parley-demo.gguf, ");

    const installed = install("carried", carrying);
    const listed = runCli(installed, "model", "embedded");
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(new RegExp(`^parley-demo \\(default\\) +parley-demo\\.gguf +[\\d.]+ MB +${sha256}$`, "m"));
    expect(runCli(install("plain"), "model", "embedded").stdout).toContain("carries no models");

    await binaryScenario(carrying, { carried: true });

    // A data directory without room for the model (a 4 MB tmpfs, mounted only when system tests are asked for).
    if (systemTests("the carried model's no-room start", () => (process.getuid?.() !== 0 ? "mounting a tmpfs needs root" : undefined)) !== undefined) return;
    const small = join(installed.dir, "small");
    mkdirSync(small);
    const mount = Bun.spawnSync(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", small], { stderr: "pipe" });
    expect(mount.exitCode, mount.stderr.toString()).toBe(0);
    try {
      const refused = runCli(installed, "serve", "--port", "0", "--data-dir", small, "--db", join(small, "parley.db"));
      expect(refused.code).toBe(1);
      expect(`${refused.stdout}${refused.stderr}`).toMatch(
        /no room to unpack the model this executable carries: parley-demo\.gguf needs \d+ MB free in \/\S+\/small\/carried\/[0-9a-f]{64}, which has \d+ MB \(.*PARLEY_DATA_DIR\)$/m,
      );
    } finally {
      Bun.spawnSync(["umount", "-l", small]);
    }
  }, 90_000);

  // Bun's ARM64 runtime comes from npm on the first such build (then from Bun's cache); the npm
  // prebuilt ARM64 natives need no cross compiler. Bounded: every start is minutes under qemu.
  test("for ARM64 (--target linux-arm64) and carrying its model, under qemu-user: the same scenario", async () => {
    const emulator = arm64Emulator();
    if ("missing" in emulator) {
      console.log(`skipped the ARM64 run: ${emulator.missing}`);
      return;
    }
    const arm64 = join(dirname(built), "parley-arm64");
    expect(build(arm64, "--target", "linux-arm64", "--embed-model", demoModel)).toContain("/linux-arm64/bins/linux-arm64");
    expect(await Bun.file(arm64).slice(18, 20).bytes()).toEqual(Uint8Array.of(0xb7, 0x00)); // ELF e_machine: EM_AARCH64
    await binaryScenario(arm64, { carried: true, emulator });
  }, 900_000);

  // One byte-level BPE family with a thought and node-llama-cpp's own format, one SentencePiece
  // family rendered through its Jinja template: the binary carries both paths.
  const FAMILY_FORMATS: Partial<Record<FamilyPreset, string>> = {
    "qwen3-thinking": "Qwen (node-llama-cpp's, equivalent to the template)",
    mistral: "the model's Jinja template",
  };
  for (const [preset, format] of Object.entries(FAMILY_FORMATS) as [FamilyPreset, string][]) {
    const { thinks } = FAMILIES[preset];
    test(`answers on a ${preset} model it writes itself into models/: ended by its end of turn, no template text${thinks ? ", the thought apart" : ""}`, async () => {
      const installed = install(preset);
      const written = runCli(installed, "model", "demo", "--preset", preset);
      expect(written.code, written.stderr).toBe(0);
      const info = runCli(installed, "model", "info", `parley-${preset}.gguf`);
      expect(info.code, info.stderr).toBe(0);
      expect(info.stdout).toContain(`chat format      ${format}`);
      const created = runCli(installed, "keys", "create", "--user", "x");
      expect(created.code, created.stderr).toBe(0);
      const key = created.stdout.trim().split("\n").at(-1)!;

      // No PARLEY_MODEL: served from ./models by its id (a generated model is never the default: the demo is).
      const server = await startServer({ installed });
      const model = `parley-${preset}`;
      try {
        const plain = await postChat(server.url, key, { message: "Hello there!", conversation_id: "c", temperature: 0, model });
        expect(plain.status).toBe(200);
        const reply = (await plain.json()) as ChatReply;
        expect(reply.model).toBe(model);
        expect(reply.message).toMatchObject({ finish_reason: "stop", content: expect.stringMatching(/^[A-Z][\w', :!?.]*[.!?]$/) });
        if (thinks) expect(reply.message.reasoning).toMatch(/^[A-Z][\w', :;!?.]*[.!?]$/);
        else expect(reply.message).not.toHaveProperty("reasoning");

        const streamed = await postChat(server.url, key, { message: "Hello there!", conversation_id: "d", temperature: 0, stream: true, model });
        const events: SseEvent[] = [];
        for await (const event of readSse(streamed)) if (event.event !== "comment") events.push(event);
        const text = (name: string) =>
          events
            .filter((e) => e.event === name)
            .map((e) => (e.data as { content: string }).content)
            .join("");
        expect(events.at(-1)!.event).toBe("done");
        expect([text("reasoning"), text("delta")]).toEqual([reply.message.reasoning ?? "", reply.message.content]);
        for (const marker of ["<think>", "</think>", "<|im_end|>", "<|im_start|>", "[INST]", "[/INST]", "</s>"])
          expect(JSON.stringify(events)).not.toContain(marker);
      } finally {
        expect(await server.stop()).toBe(0);
      }
    }, 60_000);
  }

  test("model info describes the vision preset's projector from its header, no stack trace", () => {
    const installed = install("projector");
    const written = runCli(installed, "model", "demo", "--preset", "vision");
    expect(written.code, written.stderr).toBe(0);
    const info = runCli(installed, "model", "info", "mmproj-parley-vision.gguf");
    expect([info.code, info.stderr]).toEqual([0, ""]);
    expect(info.stdout).toMatch(/^kind +projector \(mmproj\)/m);
    expect(info.stdout).toMatch(/^projector type +mlp$/m);
  });

  test("with PARLEY_GPU=cuda and no CUDA natives it says why once and serves from the CPU; it takes a CUDA build placed beside its natives", async () => {
    const installed = install("gpu");
    const modelLoaded = (lines: string[]) => JSON.parse(lines.find((line) => line.includes('"msg":"model loaded"'))!) as Record<string, unknown>;
    const noGpu = (lines: string[]) => lines.filter((line) => line.includes("no GPU is used")).map((line) => (JSON.parse(line) as { msg: string }).msg);
    const env = { PARLEY_GPU: "cuda" };
    const first = await startServer({ installed, env });
    expect(await first.stop()).toBe(0);
    expect(noGpu(first.lines)).toEqual([expect.stringContaining("this executable has no CUDA natives")]);
    expect(modelLoaded(first.lines)).toMatchObject({ natives: "embedded", device: "cpu" });

    // A stand-in CUDA build (the CPU one under the CUDA folder's name): found, it gets as far as
    // the CUDA libraries, which this machine lacks.
    const root = join(installed.env.HOME!, ".cache/parley/natives");
    const [unpacked] = readdirSync(root).filter((name) => !name.startsWith("."));
    cpSync(join(root, unpacked!, "linux-x64"), join(root, unpacked!, "linux-x64-cuda"), { recursive: true });
    const second = await startServer({ installed, env });
    expect(await second.stop()).toBe(0);
    expect(noGpu(second.lines)).toEqual([
      expect.stringMatching(/but (no NVIDIA driver is installed|CUDA 13's \w+ is not installed) \(lib\w+\.so\.\d+ not found\)$/),
    ]);
    expect(modelLoaded(second.lines)).toMatchObject({ device: "cpu" });
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
