/** The two servers under test, as child processes on free ports. */
import type { Subprocess } from "bun";
import { readFileSync } from "node:fs";
import { join } from "node:path";

export const ADMIN_KEY = "pk_bench_admin_key_0123456789abcdef";

export interface Server {
  url: string;
  pid: number;
  stop(): Promise<void>;
}

export interface ParleyOptions {
  model: string;
  db: string;
  threads: number;
  parallel: number;
  contextSize: number;
  /** Extra environment, e.g. PARLEY_KV_CACHE_MB. */
  env?: Record<string, string>;
}

const ROOT = join(import.meta.dir, "../..");

/** Resident set size in MiB, from /proc. */
export function rssMiB(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").match(/^VmRSS:\s+(\d+) kB/m);
  return line ? Number(line[1]) / 1024 : Number.NaN;
}

async function waitFor(check: () => Promise<boolean>, what: string, proc: Subprocess, timeoutMs = 120_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`${what}: process exited with ${proc.exitCode}`);
    if (await check().catch(() => false)) return;
    await Bun.sleep(100);
  }
  throw new Error(`${what}: not ready after ${timeoutMs} ms`);
}

function stopper(proc: Subprocess): () => Promise<void> {
  return async () => {
    proc.kill("SIGTERM");
    const killed = setTimeout(() => proc.kill("SIGKILL"), 10_000);
    await proc.exited;
    clearTimeout(killed);
  };
}

/** `bun src/cli.ts serve`, ready once `/readyz` answers 200 (the model is loaded). */
export async function startParley(options: ParleyOptions): Promise<Server> {
  const proc = Bun.spawn(["bun", join(ROOT, "src/cli.ts"), "serve"], {
    cwd: ROOT,
    env: {
      ...process.env,
      PARLEY_MODEL: options.model,
      PARLEY_DB: options.db,
      PARLEY_PORT: "0",
      PARLEY_ADMIN_KEY: ADMIN_KEY,
      PARLEY_THREADS: String(options.threads),
      PARLEY_PARALLEL: String(options.parallel),
      PARLEY_CONTEXT_SIZE: String(options.contextSize),
      PARLEY_QUEUE_MAX: "256",
      // The load tests are one key hammering one endpoint: no per-key limits in the way.
      PARLEY_RATE_LIMIT: "0",
      PARLEY_MAX_STREAMS_PER_KEY: "1000",
      ...options.env,
    },
    stdout: "pipe",
    stderr: "inherit",
  });
  const url = await listeningUrl(proc);
  await waitFor(async () => (await fetch(`${url}/readyz`)).status === 200, "parley", proc);
  return { url, pid: proc.pid, stop: stopper(proc) };
}

/** The URL from the `{"msg":"listening","url":...}` log line; later output is drained and dropped. */
async function listeningUrl(proc: Subprocess<"ignore", "pipe", "inherit">): Promise<string> {
  const reader = proc.stdout.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`parley exited before listening (${await proc.exited})`);
    buffer += decoder.decode(value, { stream: true });
    for (const line of buffer.split("\n")) {
      if (!line.startsWith("{")) continue;
      const entry = JSON.parse(line) as { msg?: string; url?: string };
      if (entry.msg === "listening" && entry.url) {
        void (async () => {
          while (!(await reader.read()).done);
        })();
        return entry.url;
      }
    }
  }
}

export interface LlamaServerOptions {
  binary: string;
  model: string;
  threads: number;
  parallel: number;
  /** Per slot; llama-server splits `-c` across its slots. */
  contextSize: number;
}

/** llama.cpp's own server, the yardstick. */
export async function startLlamaServer(options: LlamaServerOptions): Promise<Server> {
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const proc = Bun.spawn(
    [
      options.binary,
      "-m", options.model,
      "-t", String(options.threads),
      "-tb", String(options.threads),
      "-np", String(options.parallel),
      "-c", String(options.contextSize * options.parallel),
      "--host", "127.0.0.1",
      "--port", String(port),
      "--jinja",
      "--no-webui",
    ],
    { stdout: "ignore", stderr: "ignore" },
  );
  const url = `http://127.0.0.1:${port}`;
  await waitFor(async () => (await fetch(`${url}/health`)).status === 200, "llama-server", proc);
  return { url, pid: proc.pid, stop: stopper(proc) };
}

/** B6's bare reference server on the same database file. */
export async function startBaseline(db: string): Promise<Server> {
  const proc = Bun.spawn(["bun", join(import.meta.dir, "baseline-server.ts"), db], { stdout: "pipe", stderr: "inherit" });
  const reader = proc.stdout.getReader();
  const { value } = await reader.read();
  reader.releaseLock();
  const { url } = JSON.parse(new TextDecoder().decode(value)) as { url: string };
  return { url, pid: proc.pid, stop: stopper(proc) };
}
