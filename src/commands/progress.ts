// Download progress on stderr: a bar redrawn in place on a terminal, and on anything else
// (a log file, CI, a pipe) one plain line per quarter, so logs stay short and readable.

import { formatBytes } from "./units";

export interface ProgressReporter {
  update(done: number, total: number): void;
  /** Ends the bar's line; call once, whether the transfer finished or not. */
  end(): void;
}

const REDRAW_MS = 100;
const BAR_WIDTH = 30;

export function progressReporter(out: NodeJS.WriteStream = process.stderr): ProgressReporter {
  const started = performance.now();
  let first: number | undefined; // bytes already there when this run began (a resume)
  let lastDraw = 0;
  let lastQuarter = -1;
  let drawn = false;

  const describe = (done: number, total: number): string => {
    const seconds = (performance.now() - started) / 1000;
    const speed = seconds > 0 ? (done - (first ?? done)) / seconds : 0;
    const eta = speed > 0 && total > done ? ` ETA ${duration((total - done) / speed)}` : "";
    const rate = speed > 0 ? `  ${formatBytes(Math.round(speed))}/s` : "";
    return `${formatBytes(done)} / ${formatBytes(total)}${rate}${eta}`;
  };

  return {
    update(done, total) {
      first ??= done;
      if (total <= 0) return;
      const fraction = Math.min(done / total, 1);
      const percent = `${Math.floor(fraction * 100)}%`.padStart(4);
      if (out.isTTY) {
        const now = performance.now();
        if (now - lastDraw < REDRAW_MS && done < total) return;
        lastDraw = now;
        const filled = Math.round(fraction * BAR_WIDTH);
        out.write(`\r\x1b[K${percent} [${"#".repeat(filled)}${"-".repeat(BAR_WIDTH - filled)}] ${describe(done, total)}`);
        drawn = true;
        return;
      }
      const quarter = Math.floor(fraction * 4);
      if (quarter <= lastQuarter) return;
      lastQuarter = quarter;
      out.write(`${percent} ${describe(done, total)}\n`);
    },
    end() {
      if (drawn) out.write("\n");
      drawn = false;
    },
  };
}

function duration(seconds: number): string {
  const s = Math.ceil(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}
