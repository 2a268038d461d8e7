import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { ChatService } from "../chat/service";
import type { Config } from "../config";
import { openStorage } from "../db/open";
import { createApp } from "../http/app";
import { Engine } from "../llm/engine";
import { describeGguf, InvalidModelError, type ModelDescription } from "../llm/gguf/describe";
import { resolveModel } from "../llm/model";
import { createLogger, type Logger } from "../log";
import { Metrics } from "../metrics";

/** How long responses may take to finish once every reply is stored, before connections are cut. */
const CONNECTION_DRAIN_MS = 5_000;

function waitForSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    for (const signal of ["SIGTERM", "SIGINT"] as const) process.once(signal, () => resolve(signal));
  });
}

/** Once shutdown has begun, a second signal means "now": SQLite's WAL keeps the database whole. */
function exitOnSecondSignal(log: Logger): void {
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    process.once(signal, () => {
      log.warn({ signal }, "second signal: exiting at once");
      process.exit(1);
    });
  }
}

/**
 * Starts the service: listens at once (readiness turns 200 when the model is loaded) and runs
 * until SIGTERM/SIGINT, then stops accepting, lets running replies finish for the grace period,
 * cancels the rest (stored as `cancelled`) and closes the database. Returns the exit code.
 */
export async function serveCommand(config: Config): Promise<number> {
  const log = createLogger(config.logLevel);
  // Lifecycle lines are written at once: operators and supervisors wait for them. Request lines
  // may sit in the log's buffer for up to a second.
  const announce = (level: "info" | "fatal", fields: object, msg: string) => {
    log[level](fields, msg);
    log.flush();
  };
  const signalled = waitForSignal();
  const storage = await openStorage(config.dbPath);
  const bootstrapKey = await storage.keys.bootstrap(config.adminKey);
  if (bootstrapKey !== undefined && config.adminKey === undefined) {
    // Printed, not logged: it is the one time this key is ever shown, and logs are kept.
    console.log(`First start: created user "admin" with an admin key. It is shown only now:\n${bootstrapKey}`);
  } else if (bootstrapKey !== undefined) {
    announce("info", {}, 'first start: created user "admin" with the admin key from PARLEY_ADMIN_KEY');
  }

  const model = await resolveModel({ modelPath: config.modelPath, modelsDir: config.modelsDir });
  let described: ModelDescription;
  try {
    // Reading the header first turns a wrong, truncated or corrupt file into one clear line
    // before anything listens, instead of a native loader error later.
    described = describeGguf(model.path);
  } catch (error) {
    if (!(error instanceof InvalidModelError)) throw error;
    console.error(`parley: cannot serve this model: ${error.message}`);
    await storage.close();
    return 1;
  }
  if (model.demo) {
    announce(
      "info",
      { model: model.path },
      "no model configured: using the built-in demo model, which only babbles; put a GGUF chat model " +
        "(e.g. Qwen2.5-0.5B-Instruct) in the models directory or set PARLEY_MODEL",
    );
  }

  let engine: Engine | undefined;
  const metrics = new Metrics(() => engine);
  const chat = new ChatService(storage.conversations, { current: () => engine }, { generationTimeoutMs: config.generationTimeoutS * 1000 });
  mkdirSync(config.dataDir, { recursive: true });
  const started = performance.now();
  // Started before the HTTP app is built: the native model loading overlaps that JS work.
  const loading = Engine.load({
    modelPath: model.path,
    contextSize: config.contextSize,
    parallel: config.parallel,
    threads: config.threads,
    gpu: config.gpu,
    queueMax: config.queueMax,
    cacheDir: config.dataDir,
    kvCache: { dir: join(config.dataDir, "kv"), maxBytes: config.kvCacheMb * 2 ** 20 },
    onWarning: (message, error) => log.warn({ reason: String((error as Error)?.message ?? error) }, message),
  });
  // Settles only if loading fails: a loaded model serves until a signal comes.
  const loadFailed = loading.then(
    (loaded) => {
      engine = loaded;
      const seconds = (performance.now() - started) / 1000;
      metrics.modelLoadSeconds.set(seconds);
      announce("info", { model: loaded.modelName, ms: Math.round(seconds * 1000), context_size: loaded.contextSize, threads: loaded.threads, natives: loaded.natives }, "model loaded");
      return new Promise<never>(() => {});
    },
    (error: unknown) => error,
  );

  const app = createApp({
    storage,
    chat,
    isReady: () => engine !== undefined,
    log,
    metrics,
    limits: {
      bodyLimitBytes: config.bodyLimitBytes,
      heartbeatMs: config.heartbeatMs,
      rateLimitPerMinute: config.rateLimit,
      maxStreamsPerKey: config.maxStreamsPerKey,
      metricsPublic: config.metricsPublic,
    },
  });
  try {
    app.listen({ hostname: config.host, port: config.port });
  } catch (error) {
    // Typically the port is taken (Parley does not share ports: reusePort is off).
    console.error(`parley: cannot listen on ${config.host}:${config.port}: ${(error as Error).message}`);
    await loading.then((loaded) => loaded.dispose(), () => undefined);
    await storage.close();
    return 1;
  }
  announce(
    "info",
    {
      url: `http://${app.server?.hostname}:${app.server?.port}`,
      model: described.name,
      model_path: model.path,
      parallel: config.parallel,
      db: config.dbPath,
    },
    "listening",
  );

  const stop = await Promise.race([signalled.then((signal) => ({ signal })), loadFailed.then((error) => ({ error }))]);
  exitOnSecondSignal(log);
  if ("error" in stop) announce("fatal", { model: model.path, reason: String((stop.error as Error)?.message ?? stop.error) }, "cannot load the model");
  else announce("info", { signal: stop.signal, grace_s: config.shutdownGraceS }, "shutting down");

  const server = app.server!;
  void server.stop(false);
  await chat.shutdown(config.shutdownGraceS * 1000);
  // Every reply is stored; let responses still being written (a stream's last event) finish.
  // Idle keep-alive connections would hold `stop(false)` open, so requests are counted instead.
  const deadline = Date.now() + CONNECTION_DRAIN_MS;
  while (server.pendingRequests > 0 && Date.now() < deadline) await Bun.sleep(10);
  await server.stop(true);
  await engine?.dispose();
  await storage.close();
  announce("info", {}, "stopped");
  return "error" in stop ? 1 : 0;
}
