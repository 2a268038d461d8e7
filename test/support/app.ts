/** The app in this process, on a real port, with a real database and engine. */
import { afterAll, beforeAll } from "bun:test";
import { join } from "node:path";
import { CompletionService } from "../../src/chat/completions";
import { ConversationItemService } from "../../src/chat/conversation-item-service";
import { ResponseService } from "../../src/chat/responses";
import { NO_RETRIEVAL_MODELS, RetrievalService } from "../../src/chat/retrieval";
import { ChatService } from "../../src/chat/service";
import { TokenLedger } from "../../src/chat/token-ledger";
import { oneEngine, TurnRunner } from "../../src/chat/turn-runner";
import { openSqliteStorage, type SqliteStorage } from "../../src/db/sqlite/storage";
import type { KeyStore, Storage } from "../../src/db/storage";
import type { FileType, ModelPreset } from "../../src/gguf/presets";
import { createApp, type HttpLimits } from "../../src/http/app";
import { BackgroundResponses } from "../../src/http/background-responses";
import { type ContextOverflow, Engine, type GenerateRequest, type GenerateResult, type ReasoningMode, type Turn } from "../../src/llm/engine";
import type { Speculate } from "../../src/llm/types";
import { createLogger, type Logger, silentLogger } from "../../src/log";
import type { McpServers } from "../../src/mcp/servers";
import { Metrics } from "../../src/metrics";
import { presetModel, tempDir } from "./files";

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
  /** Runs the turns of `chat` (give both, or neither), counting to `ledger` (give both, or neither). */
  runner?: TurnRunner;
  /** Users' tokens and budgets; by default on the storage and the real clock. */
  ledger?: TokenLedger;
  chat?: ChatService;
  completions?: CompletionService;
  /** Embeddings and reranking; by default a service of no retrieval model. */
  retrieval?: RetrievalService;
  /** The node's name for `X-Parley-Node`. */
  node?: string;
  /** The MCP servers requests may name; none by default. */
  mcpServers?: McpServers;
}

export const DEFAULT_LIMITS: HttpLimits = {
  bodyLimitBytes: 65_536,
  pictureBodyLimitBytes: 65_536,
  pictureHosts: [],
  bodyTimeoutMs: 10_000,
  heartbeatMs: 10_000,
  rateLimitPerMinute: 0,
  maxStreamsPerKey: 20,
  metricsPublic: false,
  corsOrigins: [],
};

/** A logger writing JSON lines into `lines`, so tests can read what operators would see. */
export function captureLog(lines: string[]): Logger {
  return createLogger("info", { write: (line: string) => void lines.push(line) });
}

/** Whether a captured log line (pino's JSON, its level as a label) is at error level or above. */
export const isErrorLine = (line: string): boolean => {
  const { level } = JSON.parse(line) as { level: string };
  return level === "error" || level === "fatal";
};

/** The real app on a real port, so tests speak HTTP like any client. */
export function serveApp(options: ServeOptions): Served {
  const { storage, engine } = options;
  const ledger = options.ledger ?? new TokenLedger(storage.usage, storage.quotas);
  const runner =
    options.runner ??
    new TurnRunner(
      oneEngine(() => engine),
      { ledger },
    );
  const completions = options.completions ?? new CompletionService(runner, options.mcpServers);
  const chat = options.chat ?? new ChatService(storage.conversations, runner, { servers: options.mcpServers });
  const app = createApp({
    storage,
    ledger,
    chat,
    completions,
    retrieval: options.retrieval ?? new RetrievalService(NO_RETRIEVAL_MODELS, ledger),
    responses: new ResponseService(completions, chat, storage.responses, runner.engines, options.mcpServers),
    conversationItems: new ConversationItemService(storage.conversations, chat, runner.engines),
    background: new BackgroundResponses(storage.responses, silentLogger(), { flushMs: 20, pollMs: 20 }),
    isReady: () => engine !== undefined,
    node: options.node,
    log: options.logLines ? captureLog(options.logLines) : silentLogger(),
    metrics:
      options.metrics ??
      new Metrics({
        engines: () => runner.engines.loaded(),
        turns: () => runner.activeTurns,
        ...(options.mcpServers ? { mcpCalls: () => options.mcpServers!.calls() } : {}),
      }),
    limits: { ...DEFAULT_LIMITS, ...options.limits },
  }).listen({ hostname: "127.0.0.1", port: 0 });
  return {
    url: `http://127.0.0.1:${app.server!.port}`,
    stop: async () => {
      await app.stop(true);
    },
  };
}

/**
 * Real inference for tests. One thread: on these tiny models, handing work between two
 * threads costs more than it saves, and two test processes must not fight over the cores.
 */
export async function testEngine(
  options: {
    preset?: ModelPreset;
    /** A model file of its own instead of a preset's. */
    modelPath?: string;
    fileType?: FileType;
    parallel?: number;
    queueMax?: number;
    contextSize?: number;
    reasoning?: ReasoningMode;
    batchSize?: number;
    contextOverflow?: ContextOverflow;
    contextSlack?: number;
    primedTurns?: Turn[];
    speculate?: Speculate;
    onDrafts?: (drafted: number, accepted: number) => void;
    draftModelPath?: string;
    projectorPath?: string;
    onWarning?: (message: string, error: unknown) => void;
  } = {},
) {
  return Engine.load({
    projectorPath: options.projectorPath,
    speculate: options.speculate,
    draftModelPath: options.draftModelPath,
    onWarning: options.onWarning,
    onDrafts: options.onDrafts,
    reasoning: options.reasoning,
    batchSize: options.batchSize,
    contextOverflow: options.contextOverflow,
    contextSlack: options.contextSlack,
    primedTurns: options.primedTurns,
    modelPath: options.modelPath ?? (await presetModel(options.preset ?? "demo", options.fileType)),
    parallel: options.parallel ?? 2,
    queueMax: options.queueMax ?? 64,
    contextSize: options.contextSize ?? 2048,
    threads: 1,
  });
}

/** The engine's result for the request, its pieces read and dropped. */
export async function generated(engine: Engine, request: GenerateRequest): Promise<GenerateResult> {
  const generation = engine.generate(request);
  for (;;) {
    const step = await generation.next();
    if (step.done) return step.value;
  }
}

/** One generation an engine was asked for, and what it evaluated. */
export interface Generation {
  request: GenerateRequest;
  result: GenerateResult;
}

/** What an engine was really asked and really evaluated, in order: observed, not replaced. */
export function observeGenerations(engine: Engine): Generation[] {
  const generations: Generation[] = [];
  const generate = engine.generate.bind(engine);
  engine.generate = async function* (request) {
    const result = yield* generate(request);
    generations.push({ request, result });
    return result;
  };
  return generations;
}

/** What `servedEngine` sets up: a user's key to call the served app with, the app and its engine. */
export interface ServedEngine {
  key: string;
  /** Another user's key, for isolation. */
  otherKey: string;
  engine: Engine;
  served: Served;
}

/**
 * A test engine served by the app on a fresh database, with one user's key: set up before the
 * calling file's tests and closed after them. The fields are filled in by `beforeAll`.
 */
export function servedEngine(
  label: string,
  options: Parameters<typeof testEngine>[0] = {},
  serve: Pick<ServeOptions, "mcpServers" | "limits"> = {},
): ServedEngine {
  const db = testDb(label);
  const fixture = {} as ServedEngine;
  beforeAll(async () => {
    fixture.key = (await db.keys.create("alice", "user")).key;
    fixture.otherKey = (await db.keys.create("bob", "user")).key;
    fixture.engine = await testEngine(options);
    fixture.served = serveApp({ storage: db.storage, engine: fixture.engine, ...serve });
  });
  afterAll(async () => {
    await fixture.served.stop();
    await fixture.engine.close();
    await db.storage.close();
  });
  return fixture;
}
