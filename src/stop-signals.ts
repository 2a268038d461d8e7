/**
 * SIGTERM and SIGINT as the operator meant them. One Ctrl-C from a terminal reaches a process
 * more than once: the terminal signals the whole process group, and `bun run`'s script runner (and
 * Parley's own supervisor) forwards what it received as well. Signals that follow a counted one
 * within BURST_MS are that same stop; a signal after it is a second stop.
 */
const STOP_SIGNALS = ["SIGTERM", "SIGINT"] as const;
export type StopSignal = (typeof STOP_SIGNALS)[number];

/** Far above a forward's delay (well under 10 ms), far below a person's second Ctrl-C. */
export const BURST_MS = 500;

/** Calls `onStop` with each stop signal and how many stops there have been (1 for the first), until `close`. */
export function onStopSignals(onStop: (signal: StopSignal, nth: number) => void): { close(): void } {
  let counted = Number.NEGATIVE_INFINITY;
  let stops = 0;
  const listener = (signal: StopSignal) => {
    const now = performance.now();
    if (now - counted < BURST_MS) return;
    counted = now;
    onStop(signal, ++stops);
  };
  for (const signal of STOP_SIGNALS) process.on(signal, listener);
  return {
    close: () => {
      for (const signal of STOP_SIGNALS) process.off(signal, listener);
    },
  };
}
