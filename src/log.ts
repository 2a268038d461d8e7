/**
 * Structured logs: one JSON object per line on stdout (pino, no transports, so it also works
 * inside the single binary). Keys, message text and Authorization headers are never passed to
 * the logger; the redaction below is a second line of defence if one ever is.
 */
import pino, { type DestinationStream, type Logger } from "pino";

export type { Logger };

export const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export function createLogger(level: LogLevel, destination: DestinationStream = pino.destination({ sync: true })): Logger {
  return pino(
    {
      level,
      base: undefined,
      messageKey: "msg",
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: {
        paths: ["authorization", "*.authorization", "headers.authorization", "key", "*.key", "content", "*.content", "message_text"],
        censor: "[redacted]",
      },
    },
    destination,
  );
}

/** A logger for tests and commands that must stay quiet. */
export const silentLogger = (): Logger => pino({ level: "silent" });
