import { type Announce, type Service, startService } from "../compose";
import type { Config } from "../config";
import { createLogger, type Logger } from "../log";
import { missingBuildTools } from "../natives/compile";
import { compiledNativesBuilt, IN_EXECUTABLE } from "../natives/local";
import { onStopSignals } from "../stop-signals";
import { type SupervisorLink, SWITCH_EXIT, supervise, supervisorLink } from "../supervisor";

/** What the npm prebuilt cannot do, said wherever it serves. */
const PREBUILT_LACKS = "which takes no pictures and gives no log-probabilities, speculation or KV memory tier, and is slower";

/** How often a server asked to switch natives looks for a moment with no reply running. */
const QUIET_POLL_MS = 100;

type Stop = { signal: string } | { error: unknown } | { switch: true };

/**
 * `parley serve`: listens at once (readiness turns 200 when the model is loaded) and runs until
 * SIGTERM/SIGINT, then closes gracefully: running replies finish for the grace period, the rest
 * are stored as `cancelled`. A second stop exits at once. From a checkout without Parley's compiled
 * natives it serves on the prebuilt and builds them meanwhile (src/supervisor.ts). Returns the exit code.
 */
export async function serveCommand(config: Config): Promise<number> {
  const log = createLogger(config.logLevel);
  // Lifecycle lines are written at once: operators and supervisors wait for them. Request lines
  // may sit in the log's buffer for up to a second.
  const announce: Announce = (level, fields, msg) => {
    log[level](fields, msg);
    log.flush();
  };
  const link = supervisorLink();
  if (link === undefined && (await buildsNativesFirst(config, log)))
    return await supervise(announce, config.buildNatives === "auto" ? undefined : config.buildNatives);
  const { promise: signalled, resolve: stopOn } = Promise.withResolvers<Stop>();
  const signals = onStopSignals((signal, nth) => {
    if (nth === 1) return stopOn({ signal });
    log.warn({ signal }, "second signal: exiting at once");
    log.flush();
    process.exit(1);
  });
  const service = await startService(config, log, announce, link && { nativesBuild: link.report });
  link?.listening();
  const replying = link && holdBuildWhileReplying(link, service);
  const stop = await Promise.race<Stop>([
    signalled,
    service.loadFailed.then((error) => ({ error })),
    ...(link ? [link.gone.then(() => ({ signal: "supervisor gone" })), switchWhenQuiet(link, service, config.shutdownGraceS * 1000)] : []),
  ]);
  if ("error" in stop) announce("fatal", { model: service.modelPath, reason: String((stop.error as Error)?.message ?? stop.error) }, "cannot load the model");
  else if ("switch" in stop) announce("info", { grace_s: config.shutdownGraceS }, "restarting onto Parley's compiled natives");
  else announce("info", { signal: stop.signal, grace_s: config.shutdownGraceS }, "shutting down");
  if ("switch" in stop) link?.switching();
  clearInterval(replying);
  await service[Symbol.asyncDispose]();
  announce("info", {}, "stopped");
  signals.close();
  link?.close();
  return "error" in stop ? 1 : "switch" in stop ? SWITCH_EXIT : 0;
}

/**
 * Whether this start is one to supervise while the natives build: from a checkout, with
 * PARLEY_BUILD_NATIVES not `off`, and no compiled natives yet. Where the machine cannot build them
 * it serves on the prebuilt, one line saying what to install.
 */
async function buildsNativesFirst(config: Config, log: Logger): Promise<boolean> {
  if (IN_EXECUTABLE || (await compiledNativesBuilt())) return false;
  const missing = config.buildNatives === "off" ? "PARLEY_BUILD_NATIVES is off" : config.buildNatives === "auto" ? missingBuildTools() : undefined;
  if (missing === undefined) return true;
  log.warn({ reason: missing }, `Parley's compiled natives are not built: serving on the npm prebuilt, ${PREBUILT_LACKS}; \`bun run natives\` builds them`);
  return false;
}

/** Tells the supervisor when replies start and stop running, so that it holds the build meanwhile. */
function holdBuildWhileReplying(link: SupervisorLink, service: Service): Timer {
  let told = false;
  return setInterval(() => {
    const now = service.replying();
    if (now !== told) link.replying((told = now));
  }, QUIET_POLL_MS);
}

/** Once the supervisor asks, the first moment no reply runs, or the shutdown grace after the ask. */
async function switchWhenQuiet(link: SupervisorLink, service: Service, graceMs: number): Promise<Stop> {
  await link.switchAsked;
  const deadline = performance.now() + graceMs;
  while (service.replying() && performance.now() < deadline) await Bun.sleep(QUIET_POLL_MS);
  return { switch: true };
}
