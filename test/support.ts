import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ChatService } from "../src/chat/service";
import { TurnRunner } from "../src/chat/turn-runner";
import { openSqliteStorage, type SqliteStorage } from "../src/db/sqlite/storage";
import type { KeyStore, Storage } from "../src/db/storage";
import { createApp, type HttpLimits } from "../src/http/app";
import { createLogger, type Logger, silentLogger } from "../src/log";
import { Metrics } from "../src/metrics";
import { Engine } from "../src/llm/engine";
import { type ModelPreset, writePresetModel } from "../src/llm/gguf/presets";

export const tempDir = (label: string) => mkdtempSync(join(tmpdir(), `parley-${label}-`));

export interface TestDb {
  dir: string;
  path: string;
  storage: SqliteStorage;
  keys: KeyStore;
}

/** A real SQLite file in a fresh temp directory. */
export function testDb(label = "db"): TestDb {
  const dir = tempDir(label);
  const path = join(dir, "parley.db");
  const storage = openSqliteStorage(path);
  return { dir, path, storage, keys: storage.keys };
}

export interface Served {
  url: string;
  stop(): Promise<void>;
}

export interface ServeOptions {
  storage: Storage;
  /** Without one the app is up but not ready: chat answers 503, listing works. */
  engine?: Engine;
  limits?: Partial<HttpLimits>;
  /** Captures the app's log lines (JSON) when given. */
  logLines?: string[];
  metrics?: Metrics;
  chat?: ChatService;
}

export const DEFAULT_LIMITS: HttpLimits = {
  bodyLimitBytes: 65_536,
  heartbeatMs: 10_000,
  rateLimitPerMinute: 0,
  maxStreamsPerKey: 20,
  metricsPublic: false,
};

/** A logger writing JSON lines into `lines`, so tests can read what operators would see. */
export function captureLog(lines: string[]): Logger {
  return createLogger("info", { write: (line: string) => void lines.push(line) });
}

/** The real app on a real port, so tests speak HTTP like any client. */
export function serveApp(options: ServeOptions): Served {
  const { storage, engine } = options;
  const app = createApp({
    storage,
    chat: options.chat ?? new ChatService(storage.conversations, new TurnRunner({ current: () => engine })),
    isReady: () => engine !== undefined,
    log: options.logLines ? captureLog(options.logLines) : silentLogger(),
    metrics: options.metrics ?? new Metrics(() => engine),
    limits: { ...DEFAULT_LIMITS, ...options.limits },
  }).listen({ hostname: "127.0.0.1", port: 0 });
  return {
    url: `http://127.0.0.1:${app.server!.port}`,
    stop: async () => {
      await app.stop(true);
    },
  };
}

export const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

const presetFiles = new Map<ModelPreset, Promise<string>>();

/** A generated model, written once per test process into a temp dir. */
export function presetModel(preset: ModelPreset): Promise<string> {
  let file = presetFiles.get(preset);
  if (!file) {
    const path = join(tempDir(`model-${preset}`), `${preset}.gguf`);
    file = writePresetModel(preset, path).then(() => path);
    presetFiles.set(preset, file);
  }
  return file;
}

/**
 * Real inference for tests. One thread: on these tiny models, handing work between two
 * threads costs more than it saves, and two test processes must not fight over the cores.
 */
export async function testEngine(options: { preset?: ModelPreset; parallel?: number; queueMax?: number; contextSize?: number } = {}) {
  return Engine.load({
    modelPath: await presetModel(options.preset ?? "demo"),
    parallel: options.parallel ?? 2,
    queueMax: options.queueMax ?? 64,
    contextSize: options.contextSize ?? 2048,
    threads: 1,
  });
}

export interface SseEvent {
  event: string;
  data: unknown;
}

/** Reads a text/event-stream body into events; comment lines become `{ event: "comment" }`. */
export async function* readSse(response: Response): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of response.body!) {
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (block.startsWith(":")) {
        yield { event: "comment", data: block.slice(1).trim() };
        continue;
      }
      const fields = Object.fromEntries(
        block.split("\n").map((line) => [line.slice(0, line.indexOf(":")), line.slice(line.indexOf(":") + 1).trimStart()]),
      );
      yield { event: fields.event ?? "message", data: JSON.parse(fields.data ?? "null") };
    }
  }
}

export async function until(condition: () => boolean | Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(10);
  }
}

export interface ChildServer {
  url: string;
  pid: number;
  lines: string[];
  child: Bun.Subprocess<"ignore", "pipe", "pipe">;
}

/**
 * `bun src/cli.ts serve` on a generated model, resolved once `/readyz` is 200. `dbPath` may
 * be an existing database (a restart on the same data).
 */
export async function startServer(options: {
  dbPath: string;
  adminKey: string;
  preset?: "demo" | "bench-small";
  env?: Record<string, string>;
}): Promise<ChildServer> {
  const model = await presetModel(options.preset ?? "demo");
  const child = Bun.spawn(["bun", "src/cli.ts", "serve"], {
    env: {
      ...Bun.env,
      PARLEY_DB: options.dbPath,
      PARLEY_MODEL: model,
      PARLEY_PORT: "0",
      PARLEY_ADMIN_KEY: options.adminKey,
      PARLEY_THREADS: "1",
      ...options.env,
    },
    cwd: `${import.meta.dir}/..`,
    stdout: "pipe",
    stderr: "pipe",
  });
  const lines: string[] = [];
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) {
      lines.push(...decoder.decode(chunk, { stream: true }).split("\n").filter(Boolean));
      // One log line per request: keep only the recent ones, for failure messages.
      if (lines.length > 400) lines.splice(0, lines.length - 200);
    }
  };
  const collected = Promise.all([collect(child.stdout), collect(child.stderr)]);
  const deadline = Date.now() + 30_000;
  let url: string | undefined;
  while (Date.now() < deadline && child.exitCode === null) {
    url ??= lines.map((line) => /"url":"([^"]+)"/.exec(line)?.[1]).find(Boolean);
    if (url) {
      const ready = await fetch(`${url}/readyz`).then((r) => r.status === 200, () => false);
      if (ready) return { url, pid: child.pid, lines, child };
    }
    await Bun.sleep(30);
  }
  child.kill("SIGKILL");
  await Promise.race([collected, Bun.sleep(1_000)]);
  throw new Error(`server not ready (exit code ${child.exitCode}): ${lines.join("\n")}`);
}
