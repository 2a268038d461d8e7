/**
 * Runs a built executable the way an operator would: copied alone into an empty directory under
 * /tmp (no node_modules anywhere above it) and started with nothing but HOME and PATH in its
 * environment. Shared by the binary's end-to-end test and the startup benchmark; `startServer`
 * (process.ts) serves from such an install.
 */
import { copyFileSync, mkdirSync, mkdtempSync } from "node:fs";
import { join } from "node:path";

export interface Installed {
  /** The empty directory the executable was copied into; also its working directory and HOME. */
  dir: string;
  binary: string;
  env: Record<string, string>;
}

export function installAlone(built: string, label: string): Installed {
  const dir = mkdtempSync(join("/tmp", `parley-${label}-`));
  const binary = join(dir, "parley");
  copyFileSync(built, binary);
  mkdirSync(join(dir, "home"));
  return { dir, binary, env: { HOME: join(dir, "home"), PATH: "/usr/bin:/bin" } };
}

/** Runs one CLI command to completion. */
export function runCli({ dir, binary, env }: Installed, ...args: string[]) {
  const result = Bun.spawnSync([binary, ...args], { cwd: dir, env, stdout: "pipe", stderr: "pipe" });
  return { code: result.exitCode, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
}
