/** The two servers under test, as child processes on free ports. */
import { join } from "node:path";
import type { Installed } from "../../test/support/binary";
import { startServer, stopChild } from "../../test/support/process";
import { until } from "../../test/support/wait";

export const ADMIN_KEY = "pk_bench_admin_key_0123456789abcdef";
/** Loading a large model from a cold page cache takes a while. */
const STARTUP_MS = 120_000;

export interface Server {
  /** Which server it is, for messages. */
  name: string;
  url: string;
  pid: number;
  /** Resolves to the exit code. */
  stop(): Promise<number>;
}

export interface ParleyOptions {
  model: string;
  db: string;
  threads: number;
  parallel: number;
  contextSize: number;
  /** Extra environment, e.g. PARLEY_KV_CACHE_MB. */
  env?: Record<string, string>;
  /** The built executable to serve from; else `bun src/cli.ts serve`. */
  installed?: Installed;
}

/**
 * Every server this process started, as it was started (its command and the settings it was given:
 * for Parley its `PARLEY_*` environment, for llama-server its flags), for the run's record.
 */
export const launches: { server: string; command: string[]; env?: Record<string, string> }[] = [];

/** `parley serve` (from source or the built executable), ready once `/readyz` answers 200 (the model is loaded). */
export async function startParley(options: ParleyOptions): Promise<Server> {
  const env = {
    PARLEY_MODEL: options.model,
    PARLEY_THREADS: String(options.threads),
    PARLEY_PARALLEL: String(options.parallel),
    PARLEY_CONTEXT_SIZE: String(options.contextSize),
    PARLEY_QUEUE_MAX: "256",
    // The load tests are one key hammering one endpoint: no per-key limits in the way.
    PARLEY_RATE_LIMIT: "0",
    PARLEY_MAX_STREAMS_PER_KEY: "1000",
    ...options.env,
  };
  // From source the server also inherits this shell's PARLEY_* and the test harness's own (a free
  // port, no models directory, no natives build); the executable runs with only what it is given.
  const inherited = options.installed
    ? {}
    : { ...Object.fromEntries(Object.entries(Bun.env).filter(([name]) => name.startsWith("PARLEY_"))), PARLEY_BUILD_NATIVES: "off" };
  launches.push({
    server: "parley",
    command: options.installed ? ["parley", "serve", "--port", "0"] : ["bun", "src/cli.ts", "serve"],
    env: { ...inherited, ...env } as Record<string, string>,
  });
  const server = await startServer({ installed: options.installed, dbPath: options.db, adminKey: ADMIN_KEY, env, timeoutMs: STARTUP_MS });
  return { ...server, name: "parley" };
}

export interface LlamaServerOptions {
  binary: string;
  model: string;
  threads: number;
  parallel: number;
  /** Per slot; llama-server splits `-c` across its slots. */
  contextSize: number;
  /** More of its flags: `--embeddings`, `--rerank`, a batch size. */
  flags?: string[];
}

/** llama.cpp's own server, the yardstick. */
export async function startLlamaServer(options: LlamaServerOptions): Promise<Server> {
  const port = 20_000 + Math.floor(Math.random() * 20_000);
  const argv = [
    options.binary,
    "-m",
    options.model,
    "-t",
    String(options.threads),
    "-tb",
    String(options.threads),
    "-np",
    String(options.parallel),
    "-c",
    String(options.contextSize * options.parallel),
    "--host",
    "127.0.0.1",
    "--port",
    String(port),
    "--jinja",
    "--no-webui",
    ...(options.flags ?? []),
  ];
  launches.push({ server: "llama-server", command: argv.map((arg, i) => (argv[i - 1] === "--port" ? "<port>" : arg)) });
  const proc = Bun.spawn(argv, { stdout: "ignore", stderr: "ignore" });
  const url = `http://127.0.0.1:${port}`;
  const healthy = () =>
    fetch(`${url}/health`).then(
      (r) => r.status === 200,
      () => false,
    );
  await until(async () => proc.exitCode !== null || (await healthy()), "llama-server to be healthy", STARTUP_MS, 100);
  if (proc.exitCode !== null) throw new Error(`llama-server exited with ${proc.exitCode}`);
  return { name: "llama-server", url, pid: proc.pid, stop: () => stopChild(proc) };
}

/** B6's bare reference server on the same database file. */
export async function startBaseline(db: string): Promise<Server> {
  const proc = Bun.spawn(["bun", join(import.meta.dir, "baseline-server.ts"), db], { stdout: "pipe", stderr: "inherit" });
  const reader = proc.stdout.getReader();
  const { value } = await reader.read();
  reader.releaseLock();
  const { url } = JSON.parse(new TextDecoder().decode(value)) as { url: string };
  return { name: "bare Bun.serve", url, pid: proc.pid, stop: () => stopChild(proc) };
}
