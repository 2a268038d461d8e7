/**
 * The service composed from its parts, as `parley serve` runs it. Knows the parts' order and
 * lifetimes; the command around it knows signals, exit codes and the log.
 */
import { statSync } from "node:fs";
import { join } from "node:path";
import { CARRIED_MODELS } from "./carried/models";
import { UnpackError, unpackCarried } from "./carried/unpack";
import { CompletionService } from "./chat/completions";
import { ConversationItemService } from "./chat/conversation-item-service";
import { ResponseService } from "./chat/responses";
import { RetrievalService } from "./chat/retrieval";
import { type ServedEngine, ServedModels } from "./chat/served-models";
import { ChatService, preambleOf } from "./chat/service";
import { HOLD_TTL_MS, TokenLedger } from "./chat/token-ledger";
import { TurnRunner } from "./chat/turn-runner";
import { type Config, Refusal } from "./config";
import { shownPrefix } from "./db/api-keys";
import { describeLocation } from "./db/open";
import type { KeyStore } from "./db/storage";
import { createApp } from "./http/app";
import { BackgroundResponses } from "./http/background-responses";
import type { NativesBuild } from "./http/contract";
import { Embedder } from "./llm/embedder";
import { contextSizeFor, Engine } from "./llm/engine";
import { LoadedModels } from "./llm/loaded-models";
import { type GpuLayers, refuseUnlessFits, withProjector } from "./llm/memory-need";
import { ModelNotFoundError, ModelRegistry, UnservableModelError } from "./llm/model";
import { StateMemory } from "./llm/state-memory";
import type { Logger } from "./log";
import { McpServers } from "./mcp/servers";
import { Metrics } from "./metrics";
import type { BuildReport } from "./natives/background-build";
import { compiledNativesBuilt, IN_EXECUTABLE } from "./natives/local";
import { expireResponses } from "./retention";
import { ensureDataDir, openConfiguredStorage, refuseBusy } from "./startup";

/** How long responses may take to finish once every reply is stored, before connections are cut. */
const CONNECTION_DRAIN_MS = 5_000;
/** A background response's new events are kept (and a cancel from another node seen) this often; followers elsewhere look as often. */
const BACKGROUND = { flushMs: 100, pollMs: 100 };

export type Announce = (level: "info" | "warn" | "fatal", fields: object, msg: string) => void;

export interface Service extends AsyncDisposable {
  /** Settles only if the model fails to load: a loaded model serves until the process is told to stop. */
  loadFailed: Promise<unknown>;
  modelPath: string;
  /** Whether a reply is running (a turn admitted and not ended). */
  replying(): boolean;
}

/** What the service is told by what runs it. */
export interface ServiceContext {
  /** The background build of Parley's natives (src/supervisor.ts), while one was started. */
  nativesBuild?: () => BuildReport | undefined;
}

/**
 * Composes the service: storage, the engine (loading in the background while the app is built),
 * turns, and the HTTP app listening. Everything started is registered on one stack, so the
 * returned handle, or a refusal part-way, closes it all in reverse order: stop accepting, let
 * running replies finish (then cancel them), let responses finish, stop the engine, close storage.
 */
export async function startService(config: Config, log: Logger, announce: Announce, context: ServiceContext = {}): Promise<Service> {
  await using stack = new AsyncDisposableStack();
  // The models are checked first: a start refused for them must not have created (and shown) the
  // first admin key already. Reading their headers turns a wrong, truncated or corrupt file into
  // one clear line before anything listens, instead of a native loader error later.
  const registry = await openRegistry({ ...config, modelPaths: [...(await carriedPaths(config.dataDir, announce)), ...config.modelPaths] }, announce);
  const model = registry.default;
  if (model.description.purpose !== "chat") {
    throw new Refusal(
      `PARLEY_MODEL (--model) names no chat model: ${model.path} is for ${model.description.purpose}, and Parley answers turns from a chat model; name one too`,
      2,
    );
  }
  const storage = stack.use(
    await openConfiguredStorage(config.dbPath, { poolSize: config.dbPool, timeoutMs: config.dbTimeoutMs, serving: true }, { waitS: config.dbWaitS, announce }),
  );
  await bootstrapAdminKey(storage.keys, config.adminKey, announce).catch(refuseBusy);
  stack.defer(expireResponses(storage.responses, config.responsesTtlDays, announce));
  if (registry.demo) {
    announce(
      "info",
      { model: model.path },
      "no model configured: using the built-in demo model, which only babbles; put a GGUF chat model " +
        "(e.g. Qwen2.5-0.5B-Instruct) in the models directory or set PARLEY_MODEL",
    );
  }
  for (const { path, reason } of registry.unusable) announce("warn", { model_path: path, reason }, "a file in the models directory cannot be served");

  ensureDataDir(config.dataDir);
  const kvRoot = join(config.dataDir, "kv");
  const stateMemory = config.kvRamMb > 0 ? new StateMemory(config.kvRamMb * 2 ** 20) : undefined;
  const engineOptions = (path: string) => ({
    modelPath: path,
    contextSize: config.contextSize,
    parallel: config.parallel,
    threads: config.threads,
    gpu: config.gpu,
    ...(config.gpuLayers === undefined ? {} : { gpuLayers: config.gpuLayers }),
    queueMax: config.queueMax,
    cacheDir: config.dataDir,
    kvCache: { dir: kvRoot, maxBytes: config.kvCacheMb * 2 ** 20, ...(stateMemory ? { memory: stateMemory } : {}) },
    onWarning: (message: string, error: unknown) => log.warn({ reason: String((error as Error)?.message ?? error) }, message),
    reasoning: config.reasoning,
    batchSize: config.batchSize,
    flashAttention: config.flashAttention,
    kvType: config.kvType,
    contextOverflow: config.contextOverflow,
    contextSlack: config.contextSlackPercent / 100,
    promptEnds: config.promptEnds,
    speculate: config.speculate,
    ...(config.draftModel === undefined ? {} : { draftModelPath: config.draftModel }),
    onDrafts: (drafted: number, accepted: number) => metrics.drafted(drafted, accepted),
    primedTurns: preambleOf(config.systemPrompt),
  });
  let ready = false;
  const metrics = new Metrics({
    engines: () => models.loaded(),
    turns: () => runner.activeTurns,
    responses: () => storage.responses.count(),
    ...(stateMemory ? { statesInMemory: () => stateMemory.size } : {}),
    mcpCalls: () => mcpServers.calls(),
  });
  const memory = new LoadedModels<ServedEngine>({
    max: config.maxLoadedModels,
    keepAliveMs: config.keepAliveS < 0 ? -1 : config.keepAliveS * 1000,
    queueMax: config.queueMax,
    load: (entry): Promise<ServedEngine> => {
      // A projector gone since the scan is the engine's to refuse, naming it.
      const loaded = entry.projector ? withProjector(entry.description, statSync(entry.projector, { throwIfNoEntry: false })?.size ?? 0) : entry.description;
      const fits = (gpuLayers: GpuLayers) =>
        refuseUnlessFits(loaded, contextSizeFor(config.contextSize, entry.description.contextLength), config.parallel, config.kvType, gpuLayers);
      if (entry.description.purpose === "chat")
        return Engine.load({ ...engineOptions(entry.path), modelName: entry.id, ...(entry.projector ? { projectorPath: entry.projector } : {}), fits });
      const { modelPath, contextSize, parallel, threads, gpu, gpuLayers, flashAttention, kvType, onWarning } = engineOptions(entry.path);
      return Embedder.load({
        modelPath,
        modelName: entry.id,
        contextSize,
        parallel,
        threads,
        gpu,
        ...(gpuLayers === undefined ? {} : { gpuLayers }),
        flashAttention,
        kvType,
        onWarning,
        fits,
      });
    },
    onLoaded: (entry, loaded, ms) => {
      metrics.modelLoaded(entry.id, ms / 1000);
      announce(
        "info",
        {
          model: entry.id,
          ms: Math.round(ms),
          context_size: loaded.contextSize,
          threads: loaded.threads,
          natives: loaded.natives,
          device: loaded.device.device,
          ...(loaded.device.gpuLayers === undefined ? {} : { gpu_layers: loaded.device.gpuLayers }),
          ...(loaded.device.vramBytes === undefined ? {} : { vram_mib: Math.round(loaded.device.vramBytes / 2 ** 20) }),
        },
        "model loaded",
      );
    },
    onUnloaded: (entry) => announce("info", { model: entry.id }, "model unloaded"),
    onError: (entry, error) => log.warn({ model: entry.id, reason: String((error as Error)?.message ?? error) }, "a model could not be loaded or unloaded"),
  });
  stack.defer(() => memory.close());
  const models = new ServedModels(registry, memory, () => ready, kvRoot, IN_EXECUTABLE || (await compiledNativesBuilt()));
  // A hold must outlast the longest reply the generation cap allows.
  const ledger = new TokenLedger(storage.usage, storage.quotas, Date.now, Math.max(HOLD_TTL_MS, config.generationTimeoutS * 1000 + 60_000));
  const runner = new TurnRunner(models, {
    generationTimeoutMs: config.generationTimeoutS * 1000,
    shutdownGraceMs: config.shutdownGraceS * 1000,
    ledger,
    onLedgerError: (error) => log.warn({ reason: String((error as Error)?.message ?? error) }, "a reply's tokens could not be counted to its user"),
  });
  // Started before the HTTP app is built: the native model loading overlaps that JS work. The
  // default model is loaded at the start, and the service is ready once it is.
  const loadFailed = memory.hold(model).then(
    (held) => {
      held.release();
      ready = true;
      return new Promise<never>(() => {});
    },
    (error: unknown) => error,
  );

  const mcpServers = new McpServers(config.mcpServers, (label, state, detail) =>
    log.info({ mcp_server: label, state, ...detail }, `MCP server ${label} ${state}`),
  );
  stack.defer(() => mcpServers.close());
  mcpServers.start();
  const completions = new CompletionService(runner, mcpServers);
  const chat = new ChatService(storage.conversations, runner, {
    systemPrompt: config.systemPrompt,
    shared: storage.leases && { leases: storage.leases, ttlMs: config.leaseTtlS * 1000 },
    servers: mcpServers,
  });
  const background = new BackgroundResponses(storage.responses, log, BACKGROUND);
  const app = createApp({
    storage,
    ledger,
    node: config.nodeName,
    chat,
    background,
    completions,
    retrieval: new RetrievalService(models, ledger),
    responses: new ResponseService(completions, chat, storage.responses, runner.engines, mcpServers),
    conversationItems: new ConversationItemService(storage.conversations, chat, runner.engines),
    isReady: () => ready,
    ...(context.nativesBuild ? { nativesBuild: nativesBuildOf(context.nativesBuild) } : {}),
    log,
    metrics,
    limits: {
      bodyLimitBytes: config.bodyLimitBytes,
      pictureBodyLimitBytes: config.pictureBodyLimitBytes,
      pictureHosts: config.pictureHosts,
      bodyTimeoutMs: config.bodyTimeoutS * 1000,
      heartbeatMs: config.heartbeatMs,
      rateLimitPerMinute: config.rateLimit,
      maxStreamsPerKey: config.maxStreamsPerKey,
      metricsPublic: config.metricsPublic,
      corsOrigins: config.corsOrigins,
    },
  });
  try {
    app.listen({ hostname: config.host, port: config.port });
  } catch (error) {
    // Typically the port is taken (Parley does not share ports: reusePort is off).
    throw new Refusal(`cannot listen on ${config.host}:${config.port}: ${(error as Error).message}`);
  }
  const server = app.server!;
  // Resolves once no request is in flight (idle keep-alive connections do not hold it).
  let drained: Promise<void> | undefined;
  stack.defer(async () => {
    // Every reply is stored by now; a stream may still be writing its last event.
    let timer: Timer | undefined;
    await Promise.race([drained, new Promise((resolve) => (timer = setTimeout(resolve, CONNECTION_DRAIN_MS)))]);
    clearTimeout(timer);
    await server.stop(true);
  });
  // After the runner: its turns have ended, their last events are being kept.
  stack.defer(() => background.settled());
  stack.use(runner);
  stack.defer(() => void (drained = server.stop(false)));
  announce(
    "info",
    {
      url: `http://${server.hostname}:${server.port}`,
      model: model.id,
      model_path: model.path,
      models: registry.models.length,
      parallel: config.parallel,
      db: describeLocation(config.dbPath),
    },
    "listening",
  );

  const owned = stack.move();
  return { loadFailed, modelPath: model.path, replying: () => runner.activeTurns > 0, [Symbol.asyncDispose]: () => owned.disposeAsync() };
}

/** The build's report in the health route's words. */
const nativesBuildOf = (report: () => BuildReport | undefined) => (): NativesBuild | undefined => {
  const build = report();
  return (
    build && {
      state: build.state,
      elapsed_s: build.elapsedS,
      ...(build.step === undefined ? {} : { step: build.step }),
      ...(build.reason === undefined ? {} : { reason: build.reason }),
    }
  );
};

/**
 * The models this executable carries (none from a checkout), as named files ahead of PARLEY_MODEL's:
 * the first is the default. The first start unpacks them into the data directory; a start that
 * cannot (no room) is refused saying what it needs.
 */
async function carriedPaths(dataDir: string, announce: Announce): Promise<string[]> {
  if (CARRIED_MODELS.length === 0) return [];
  ensureDataDir(dataDir);
  const started = performance.now();
  try {
    const { paths, written } = await unpackCarried(CARRIED_MODELS, dataDir);
    if (written.length > 0) {
      announce(
        "info",
        { files: written, ms: Math.round(performance.now() - started) },
        "unpacked the models this executable carries (once: later starts use the files)",
      );
    }
    return paths;
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    // An UnpackError already says what is needed and where; anything else (a directory it cannot write) gets the place.
    throw new Refusal(error instanceof UnpackError ? reason : `cannot unpack the models this executable carries into ${dataDir}: ${reason}`);
  }
}

async function openRegistry(config: Config, announce: Announce): Promise<ModelRegistry> {
  try {
    return await ModelRegistry.open({ paths: config.modelPaths, modelsDir: config.modelsDir, aliases: config.modelAliases, announce });
  } catch (error) {
    if (error instanceof ModelNotFoundError) throw new Refusal(error.message, 2);
    if (error instanceof UnservableModelError) throw new Refusal(error.message);
    throw error;
  }
}

/** The first start creates the admin key; on a later one, PARLEY_ADMIN_KEY is read only to point out a change. */
async function bootstrapAdminKey(keys: KeyStore, adminKey: string | undefined, announce: Announce): Promise<void> {
  const key = await keys.bootstrap(adminKey);
  if (key === undefined) {
    if (adminKey !== undefined && !(await isAdminKey(keys, adminKey))) {
      announce(
        "warn",
        {},
        "PARLEY_ADMIN_KEY is ignored: it is read only on the first start, and it is not an admin key of this database (parley keys create --admin issues one)",
      );
    }
    return;
  }
  // Printed, not logged: it is the one time this key is ever shown, and logs are kept.
  if (adminKey === undefined) console.log(`First start: created user "admin" with an admin key. It is shown only now:\n${key}`);
  else announce("info", {}, 'first start: created user "admin" with the admin key from PARLEY_ADMIN_KEY');
}

/** Told by its shown prefix rather than by `verify`, which would record a use of the key. */
const isAdminKey = async (keys: KeyStore, key: string): Promise<boolean> =>
  (await keys.list()).some((row) => row.role === "admin" && row.revokedAt === null && row.prefix === shownPrefix(key));
