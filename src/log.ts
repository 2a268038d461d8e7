/**
 * Structured logs: one JSON object per line on stdout (pino, no transports, so it also works
 * inside the single binary). Keys, message text and Authorization headers are never passed to
 * the logger (a test reads the log lines to hold that). pino's `redact` is not used: it re-parses
 * its paths on every call, a measurable part of a listing request's CPU, to guard fields never logged.
 */
import pino, { type DestinationStream, type Logger } from "pino";

export type { Logger };

export const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** How long a request line may wait in the buffer of a quiet server. */
const FLUSH_INTERVAL_MS = 1_000;

/**
 * Request lines are batched into writes of 4 KiB instead of a write per line (a write per line was
 * a sizeable part of a listing request's time). A timer flushes a quiet buffer within a second, the
 * lifecycle lines call `flush()` themselves, and the rest is written out when the process exits.
 */
function stdoutDestination(): DestinationStream {
  const stream = pino.destination({ sync: true, minLength: 4096 });
  setInterval(() => stream.flush(), FLUSH_INTERVAL_MS).unref();
  process.once("exit", () => stream.flushSync());
  return stream;
}

export function createLogger(level: LogLevel, destination: DestinationStream = stdoutDestination()): Logger {
  return pino(
    {
      level,
      base: undefined,
      messageKey: "msg",
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
}

/** A logger for tests and commands that must stay quiet. */
export const silentLogger = (): Logger => pino({ level: "silent" });
