/**
 * Runs a built executable the way an operator would: copied alone into an empty directory under
 * /tmp (no node_modules anywhere above it) and started with nothing but HOME and PATH in its
 * environment. Shared by the binary's end-to-end test and the startup benchmark.
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

export interface Serving {
  url: string;
  process: Bun.Subprocess<"ignore", "pipe", "pipe">;
  /** Milliseconds from spawning the process to its "listening" line (the model loads after it). */
  listeningMs: number;
  /** Milliseconds from spawning the process to the first 200 from /readyz. */
  readyMs: number;
  /** Every stdout line so far. */
  output: string[];
}

/** Starts `parley serve` on a free port and waits until /readyz answers 200. */
export async function startServe({ dir, binary, env }: Installed, extraEnv: Record<string, string> = {}, timeoutMs = 20_000): Promise<Serving> {
  const started = performance.now();
  const process = Bun.spawn([binary, "serve", "--port", "0"], { cwd: dir, env: { ...env, ...extraEnv }, stdout: "pipe", stderr: "pipe" });
  const output: string[] = [];
  let url: string | undefined;
  let listeningMs = Number.NaN;
  void (async () => {
    const reader = process.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let partial = "";
    for (let read = await reader.read(); !read.done; read = await reader.read()) {
      const lines = (partial + read.value).split("\n");
      partial = lines.pop()!;
      for (const line of lines) {
        output.push(line);
        const parsed = line.startsWith("{") ? (JSON.parse(line) as { msg?: string; url?: string }) : undefined;
        if (parsed?.msg === "listening") {
          url = parsed.url;
          listeningMs = performance.now() - started;
        }
      }
    }
  })();
  while (performance.now() - started < timeoutMs && process.exitCode === null) {
    if (url !== undefined && (await fetch(`${url}/readyz`).catch(() => undefined))?.status === 200) {
      return { url, process, listeningMs, readyMs: performance.now() - started, output };
    }
    await Bun.sleep(5);
  }
  process.kill("SIGKILL");
  const stderr = await new Response(process.stderr).text();
  throw new Error(`parley serve did not become ready (exit ${process.exitCode}):\n${output.join("\n")}\n${stderr}`);
}
