/**
 * Runs a built executable the way an operator would: copied alone into an empty directory under
 * /tmp (no node_modules anywhere above it) and started with nothing but HOME and PATH in its
 * environment. Shared by the binary's end-to-end test and the startup benchmark; `startServer`
 * (process.ts) serves from such an install.
 */
import { copyFileSync, existsSync, mkdirSync, mkdtempSync } from "node:fs";
import { join } from "node:path";

export interface Installed {
  /** The empty directory the executable was copied into; also its working directory and HOME. */
  dir: string;
  binary: string;
  env: Record<string, string>;
  /** Another CPU's executable runs under its emulator. */
  emulator?: Emulator;
}

/** qemu-user running another CPU's executable: the command before it, its settings, and how long a start may take there. */
export interface Emulator {
  argv: string[];
  env: Record<string, string>;
  startMs: number;
}

/** Debian's cross toolchain puts ARM64's loader and libraries here (libc6-arm64-cross, libstdc++6-arm64-cross). */
const ARM64_ROOT = "/usr/aarch64-linux-gnu";

/** qemu-user for ARM64 Linux executables, or why there is none here. */
export function arm64Emulator(): Emulator | { missing: string } {
  const qemu = Bun.which("qemu-aarch64-static") ?? Bun.which("qemu-aarch64");
  if (qemu === null) return { missing: "no qemu-aarch64 (Debian: apt-get install qemu-user-static)" };
  if (!existsSync(join(ARM64_ROOT, "lib/ld-linux-aarch64.so.1")) || !existsSync(join(ARM64_ROOT, "lib/libstdc++.so.6"))) {
    return { missing: `no ARM64 C and C++ libraries in ${ARM64_ROOT} (Debian: apt-get install libc6-arm64-cross libstdc++6-arm64-cross)` };
  }
  // Minutes, not seconds: every instruction of the runtime and the model is translated.
  return { argv: [qemu], env: { QEMU_LD_PREFIX: ARM64_ROOT }, startMs: 240_000 };
}

export function installAlone(built: string, label: string, emulator?: Emulator): Installed {
  const dir = mkdtempSync(join("/tmp", `parley-${label}-`));
  const binary = join(dir, "parley");
  copyFileSync(built, binary);
  mkdirSync(join(dir, "home"));
  return { dir, binary, env: { HOME: join(dir, "home"), PATH: "/usr/bin:/bin", ...emulator?.env }, ...(emulator ? { emulator } : {}) };
}

/** The command line that runs the installed executable with `args`. */
export const commandOf = ({ binary, emulator }: Installed, ...args: string[]) => [...(emulator?.argv ?? []), binary, ...args];

/** Runs one CLI command to completion. */
export function runCli(installed: Installed, ...args: string[]) {
  const { dir, env } = installed;
  const result = Bun.spawnSync(commandOf(installed, ...args), { cwd: dir, env, stdout: "pipe", stderr: "pipe" });
  return { code: result.exitCode, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
}
