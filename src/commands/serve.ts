import { type Announce, startService } from "../compose";
import type { Config } from "../config";
import { createLogger, type Logger } from "../log";

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
 * `parley serve`: listens at once (readiness turns 200 when the model is loaded) and runs until
 * SIGTERM/SIGINT, then closes gracefully: running replies finish for the grace period, the rest
 * are stored as `cancelled`. Returns the exit code.
 */
export async function serveCommand(config: Config): Promise<number> {
  const log = createLogger(config.logLevel);
  // Lifecycle lines are written at once: operators and supervisors wait for them. Request lines
  // may sit in the log's buffer for up to a second.
  const announce: Announce = (level, fields, msg) => {
    log[level](fields, msg);
    log.flush();
  };
  const signalled = waitForSignal();
  const service = await startService(config, log, announce);
  const stop = await Promise.race([signalled.then((signal) => ({ signal })), service.loadFailed.then((error) => ({ error }))]);
  exitOnSecondSignal(log);
  if ("error" in stop) announce("fatal", { model: service.modelPath, reason: String((stop.error as Error)?.message ?? stop.error) }, "cannot load the model");
  else announce("info", { signal: stop.signal, grace_s: config.shutdownGraceS }, "shutting down");
  await service[Symbol.asyncDispose]();
  announce("info", {}, "stopped");
  return "error" in stop ? 1 : 0;
}
