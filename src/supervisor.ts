/**
 * `parley serve` from a checkout without Parley's compiled natives: the server runs at once on the
 * npm prebuilt while the natives build in the background, then moves onto them. A process cannot
 * swap a loaded native addon, so the server runs as a child of this thin supervisor, which, once the
 * build is done, asks it to stop at a quiet moment (no reply running, or after the shutdown grace)
 * with the usual graceful shutdown (replies finished, KV states saved, the database and its lock
 * released) and starts it again: the new child loads the compiled natives. Conversations live in
 * the database and their KV states on disk, so they continue; the gap is the restart's.
 *
 * Both sides of the conversation between them are here: the supervisor's (`supervise`) and the
 * child's (`supervisorLink`), over Bun's IPC channel.
 */
import type { Subprocess } from "bun";
import type { Announce } from "./compose";
import { type BuildReport, startBackgroundBuild } from "./natives/background-build";
import { onStopSignals } from "./stop-signals";

/** Set in the child's environment: it is this supervisor's, and talks to it. */
const SUPERVISED_ENV = "PARLEY_SUPERVISED";
/** The child's exit code when it stopped to be started again on the compiled natives. */
export const SWITCH_EXIT = 75;

type ToChild = { natives: BuildReport } | { switchNow: true };
type ToSupervisor = { hello: true } | { switching: true } | { listening: true } | { replying: boolean };

/** How far apart the build's steps are logged: the build has some 260. */
const LOGGED_STEPS = 10;

/**
 * Runs the server as a child while `bun run natives` (or `command`) builds, restarting it onto the
 * compiled natives once built. Returns the exit code of the server's last run.
 */
export async function supervise(announce: Announce, command: string | undefined): Promise<number> {
  let child: Subprocess | undefined;
  let switchingAt: number | undefined;
  let loggedTenth = -1;
  const tell = (message: ToChild) => {
    try {
      child?.send(message);
    } catch {}
  };
  const build = startBackgroundBuild(command, (report) => {
    tell({ natives: report });
    const [done, total] = (report.step ?? "")
      .replace(/[[\]%]/g, "")
      .split("/")
      .map(Number);
    const tenth = Math.floor(((done ?? 0) / (total ?? 100)) * LOGGED_STEPS);
    if (tenth > loggedTenth) {
      loggedTenth = tenth;
      announce("info", { step: report.step, elapsed_s: report.elapsedS }, "building Parley's natives");
    }
  });
  announce(
    "warn",
    { command: command ?? "bun run natives" },
    "Parley's compiled natives are not built: serving on the npm prebuilt meanwhile (no pictures, log-probabilities, speculation or KV memory tier, and slower), " +
      "building them in the background at idle priority; the server restarts onto them once built",
  );
  let built = false;
  /** Once restarted, the server runs on the compiled natives: it is never asked again. */
  let restarted = false;
  const onMessage = (message: ToSupervisor) => {
    if ("replying" in message) build.hold(message.replying);
    else if ("hello" in message) {
      tell({ natives: build.report() });
      if (built && !restarted) tell({ switchNow: true });
    } else if ("switching" in message) switchingAt = performance.now();
    else if (switchingAt !== undefined) {
      announce("info", { gap_ms: Math.round(performance.now() - switchingAt) }, "serving on Parley's compiled natives");
      switchingAt = undefined;
    }
  };
  void build.done.then((ok) => {
    const report = build.report();
    if (!ok) {
      if (report.reason !== "stopped")
        announce("warn", { reason: report.reason, elapsed_s: report.elapsedS }, "Parley's natives could not be built: serving on the npm prebuilt");
      tell({ natives: report });
      return;
    }
    built = true;
    announce("info", { elapsed_s: report.elapsedS }, "Parley's natives are built: the server restarts onto them at the next moment no reply runs");
    tell({ natives: report });
    tell({ switchNow: true });
  });

  let stopping = false;
  const signals = onStopSignals((signal) => {
    stopping = true;
    build.stop();
    child?.kill(signal);
  });
  try {
    for (;;) {
      child = Bun.spawn([process.execPath, ...Bun.argv.slice(1)], {
        env: { ...process.env, [SUPERVISED_ENV]: "1" },
        stdio: ["inherit", "inherit", "inherit"],
        ipc: (message) => onMessage(message as ToSupervisor),
        serialization: "json",
      });
      const code = await child.exited;
      // A child gone while replying leaves no one to let the build go on.
      build.hold(false);
      if (code !== SWITCH_EXIT) return code;
      if (stopping) return 0;
      restarted = true;
    }
  } finally {
    signals.close();
    build.stop();
  }
}

export interface SupervisorLink {
  /** The build's progress, as last told. */
  report(): BuildReport | undefined;
  /** Resolves when the supervisor asks the server to restart onto the compiled natives. */
  switchAsked: Promise<void>;
  /** Resolves if the supervisor is gone: the server stops as if signalled. */
  gone: Promise<void>;
  /** Tells the supervisor the server has begun to stop for the switch. */
  switching(): void;
  /** Tells the supervisor whether replies run (the build is held meanwhile). */
  replying(replying: boolean): void;
  listening(): void;
  close(): void;
}

/** The child's side, when this process is a supervisor's child. */
export function supervisorLink(): SupervisorLink | undefined {
  if (Bun.env[SUPERVISED_ENV] !== "1" || typeof process.send !== "function") return undefined;
  let report: BuildReport | undefined;
  const { promise: switchAsked, resolve: askSwitch } = Promise.withResolvers<void>();
  const { promise: gone, resolve: leave } = Promise.withResolvers<void>();
  const onMessage = (message: ToChild) => {
    if ("natives" in message) report = message.natives;
    else askSwitch();
  };
  process.on("message", onMessage);
  process.once("disconnect", () => leave());
  const send = (message: ToSupervisor) => {
    try {
      process.send?.(message);
    } catch {}
  };
  send({ hello: true });
  return {
    report: () => report,
    switchAsked,
    gone,
    switching: () => send({ switching: true }),
    replying: (replying) => send({ replying }),
    listening: () => send({ listening: true }),
    close: () => {
      process.off("message", onMessage);
      process.removeAllListeners("disconnect");
      process.disconnect?.();
    },
  };
}
