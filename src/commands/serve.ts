import { ChatService } from "../chat/service";
import type { Config } from "../config";
import { openStorage } from "../db/client";
import { KeyStore } from "../db/keys";
import { createApp } from "../http/app";
import { Engine } from "../llm/engine";
import { resolveModel } from "../llm/model";

const log = (msg: string, fields: Record<string, unknown> = {}) =>
  console.log(JSON.stringify({ time: new Date().toISOString(), level: "info", msg, ...fields }));

/** Starts the service, listening at once while the model loads, and runs until SIGTERM/SIGINT. */
export async function serveCommand(config: Config): Promise<number> {
  const storage = openStorage(config.dbPath);
  const keys = new KeyStore(storage.db);
  const bootstrapKey = keys.bootstrap(config.adminKey);
  if (bootstrapKey !== undefined) {
    console.log(
      config.adminKey === undefined
        ? `First start: created user "admin" with an admin key. It is shown only now:\n${bootstrapKey}`
        : `First start: created user "admin" with the admin key from PARLEY_ADMIN_KEY.`,
    );
  }

  let engine: Engine | undefined;
  const chat = new ChatService(storage.db, { current: () => engine });
  const app = createApp({
    db: storage.db,
    keys,
    chat,
    isReady: () => engine !== undefined,
    bodyLimitBytes: config.bodyLimitBytes,
    heartbeatMs: config.heartbeatMs,
  }).listen({ hostname: config.host, port: config.port });
  log("listening", { url: `http://${app.server?.hostname}:${app.server?.port}` });

  const stopped = new Promise<void>((resolve) => {
    process.once("SIGTERM", () => resolve());
    process.once("SIGINT", () => resolve());
  });

  const model = await resolveModel({ modelPath: config.modelPath, modelsDir: config.modelsDir });
  if (model.demo) {
    log(
      `no model configured: using the built-in demo model ${model.path} (it only babbles); ` +
        "put a GGUF chat model (e.g. Qwen2.5-0.5B-Instruct) in the models directory or set PARLEY_MODEL",
    );
  }
  const started = performance.now();
  engine = await Engine.load({
    modelPath: model.path,
    contextSize: config.contextSize,
    parallel: config.parallel,
    threads: config.threads,
    gpu: config.gpu,
    queueMax: config.queueMax,
  });
  log("model loaded", { model: engine.modelName, path: model.path, ms: Math.round(performance.now() - started), context_size: engine.contextSize, parallel: config.parallel, threads: engine.threads });

  await stopped;
  log("shutting down");
  await app.stop();
  await engine.dispose();
  storage.close();
  return 0;
}
