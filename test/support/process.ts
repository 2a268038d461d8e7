/**
 * `parley serve` as a child process on a free port, resolved once /readyz answers 200: from this
 * checkout's source (tests, benchmarks), or as a built executable installed alone (binary.ts).
 */

import { join } from "node:path";
import type { Subprocess } from "bun";
import type { ModelPreset } from "../../src/gguf/presets";
import { commandOf, type Installed } from "./binary";
import { presetModel, tempDir } from "./files";
import { eachLine } from "./http";
import { until } from "./wait";

const ROOT = join(import.meta.dir, "../..");

export interface ServerOptions {
  /** Runs this built executable with only its own environment; without it, `bun src/cli.ts serve`. */
  installed?: Installed;
  /** An existing database is used as it is (a restart on the same data). */
  dbPath?: string;
  adminKey?: string;
  /** The generated model a source run serves, unless `env` sets PARLEY_MODEL. Default: demo. */
  preset?: ModelPreset;
  /** Settings that win over the ones above, e.g. PARLEY_PARALLEL. */
  env?: Record<string, string>;
  timeoutMs?: number;
  /** How often /readyz is asked: often enough for `readyMs` to be a measurement. */
  pollMs?: number;
  /** Told of each line of output as it arrives, also before the server is ready. */
  onLine?: (line: string) => void;
}

export interface ChildServer {
  url: string;
  pid: number;
  child: Subprocess<"ignore", "pipe", "pipe">;
  /** The recent lines of stdout and stderr. */
  lines: string[];
  /** Every line logged at level error or fatal. */
  errorLines: string[];
  /** Milliseconds from spawning the process to its "listening" line (the model loads after it). */
  listeningMs: number;
  /** Milliseconds from spawning the process to the first 200 from /readyz. */
  readyMs: number;
  /** See `stopChild`. */
  stop(): Promise<number>;
}

/** SIGTERM, and SIGKILL after `killAfterMs` if that has not ended it; resolves to the exit code. */
export async function stopChild(child: Subprocess, killAfterMs = 10_000): Promise<number> {
  child.kill("SIGTERM");
  const killer = setTimeout(() => child.kill("SIGKILL"), killAfterMs);
  const code = await child.exited;
  clearTimeout(killer);
  return code;
}

async function command(options: ServerOptions): Promise<{ argv: string[]; cwd: string; env: Record<string, string | undefined> }> {
  if (options.installed) {
    const { dir, env } = options.installed;
    return { argv: commandOf(options.installed, "serve", "--port", "0"), cwd: dir, env };
  }
  const model = options.env?.PARLEY_MODEL === undefined ? { PARLEY_MODEL: await presetModel(options.preset ?? "demo") } : {};
  // A free port unless `env` names one. One thread: two test processes must not fight over the
  // cores. An empty models directory: the checkout's `models/` may hold a developer's models,
  // which would be served too.
  return {
    argv: ["bun", "src/cli.ts", "serve"],
    cwd: ROOT,
    // No background build of the natives where they are not compiled: tests serve on what there is.
    env: { ...Bun.env, PARLEY_PORT: "0", PARLEY_THREADS: "1", PARLEY_MODELS_DIR: tempDir("no-models"), PARLEY_BUILD_NATIVES: "off", ...model },
  };
}

/** Spawns `parley serve` and resolves once it is ready; throws with its output if it exits or times out first. */
export async function startServer(options: ServerOptions = {}): Promise<ChildServer> {
  const { argv, cwd, env } = await command(options);
  const started = performance.now();
  const child = Bun.spawn(argv, {
    cwd,
    env: {
      ...env,
      ...(options.dbPath === undefined ? {} : { PARLEY_DB: options.dbPath }),
      ...(options.adminKey === undefined ? {} : { PARLEY_ADMIN_KEY: options.adminKey }),
      ...options.env,
    },
    stdout: "pipe",
    stderr: "pipe",
  });
  const lines: string[] = [];
  const errorLines: string[] = [];
  let url: string | undefined;
  let listeningMs = Number.NaN;
  const collect = (stream: ReadableStream<Uint8Array>) =>
    eachLine(stream, (line) => {
      lines.push(line);
      options.onLine?.(line);
      if (/"level":"(error|fatal)"/.test(line)) errorLines.push(line);
      if (url === undefined && /"msg":"listening"/.test(line)) {
        url = (JSON.parse(line) as { url: string }).url;
        listeningMs = performance.now() - started;
      }
      // One log line per request: keep only the recent ones, for failure messages.
      if (lines.length > 400) lines.splice(0, lines.length - 200);
    });
  const collected = Promise.all([collect(child.stdout), collect(child.stderr)]);

  let readyMs: number | undefined;
  const readyOrExited = async () => {
    if (child.exitCode !== null) return true;
    if (
      url === undefined ||
      !(await fetch(`${url}/readyz`).then(
        (r) => r.status === 200,
        () => false,
      ))
    )
      return false;
    readyMs = performance.now() - started;
    return true;
  };
  await until(readyOrExited, "/readyz to answer 200", options.timeoutMs ?? options.installed?.emulator?.startMs ?? 30_000, options.pollMs ?? 25).catch(
    () => undefined,
  );
  if (readyMs !== undefined && url !== undefined) {
    return { url, pid: child.pid, child, lines, errorLines, listeningMs, readyMs, stop: () => stopChild(child) };
  }
  child.kill("SIGKILL");
  // Its last words (a port in use, a bad setting) are what the failure is about.
  await Promise.race([collected, Bun.sleep(1_000)]);
  throw new Error(`parley serve not ready (exit code ${child.exitCode}):\n${lines.join("\n")}`);
}
