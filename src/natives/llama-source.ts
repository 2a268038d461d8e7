/**
 * The llama.cpp source node-llama-cpp binds ships inside its package as a git bundle; its CLI
 * unpacks it offline into `node_modules/node-llama-cpp/llama/llama.cpp`. Both the fast natives
 * and the benchmark's llama-server yardstick compile that exact tree, so they match the engine.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";

export const ROOT = join(import.meta.dir, "../..");
export const NLC_LLAMA_DIR = join(ROOT, "node_modules/node-llama-cpp/llama");
export const LLAMA_CPP_DIR = join(NLC_LLAMA_DIR, "llama.cpp");
const NLC_CLI = join(ROOT, "node_modules/.bin/node-llama-cpp");

/** Runs a command with inherited output; throws naming it when it fails. */
export async function run(cmd: string[], options: { cwd?: string; env?: Record<string, string> } = {}): Promise<void> {
  const proc = Bun.spawn(cmd, {
    cwd: options.cwd ?? ROOT,
    env: { ...process.env, ...options.env },
    stdio: ["ignore", "inherit", "inherit"],
  });
  const code = await proc.exited;
  if (code !== 0) throw new Error(`${cmd.join(" ")} exited with ${code}`);
}

/** Unpacks the bundled source unless it is already there. */
export async function ensureLlamaSource(): Promise<string> {
  if (!existsSync(join(LLAMA_CPP_DIR, "CMakeLists.txt"))) {
    await run([NLC_CLI, "source", "download", "--gpu", "false", "--skipBuild", "--noUsageExample"]);
  }
  return LLAMA_CPP_DIR;
}

export { NLC_CLI };
