/**
 * One progress line for a long native build, read from the build tool's own step lines (ninja's
 * `[n/N] …`, make's `[ nn%] …`): on a terminal it rewrites itself in place, elsewhere (CI logs,
 * pipes) each step is a plain line. Everything else the build prints goes to a log file only.
 */
export interface Step {
  /** `[n/N]` or `[nn%]`. */
  position: string;
  /** What the step works on, e.g. `ggml-cpu-haswell ggml-cpu/ops.cpp`. */
  what: string;
}

export function parseStep(line: string): Step | undefined {
  const match = /^\[\s*(\d+\/\d+|\d+%)\]\s+(.*)$/.exec(line.trim());
  if (!match) return undefined;
  const description = match[2]!;
  // "Building CXX object llama.cpp/ggml/src/CMakeFiles/ggml-cpu-haswell.dir/ggml-cpu/ops.cpp.o"
  const object = /object \S*?CMakeFiles\/([^/]+)\.dir\/(\S+?)\.o$/.exec(description);
  return { position: `[${match[1]}]`, what: object ? `${object[1]} ${object[2]}` : description };
}

export interface ProgressLine {
  step(step: Step): void;
  /** Leaves the terminal on a fresh line. */
  end(): void;
}

export function progressLine(label: string, out: NodeJS.WriteStream = process.stderr): ProgressLine {
  const started = performance.now();
  let drawn = false;
  const elapsed = () => {
    const seconds = Math.round((performance.now() - started) / 1000);
    return `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, "0")}`;
  };
  return {
    step({ position, what }) {
      const text = `${label} ${position} ${elapsed()} ${what}`;
      if (!out.isTTY) {
        out.write(`${text}\n`);
        return;
      }
      out.write(`\r\x1b[2K${text.slice(0, Math.max(20, (out.columns ?? 80) - 1))}`);
      drawn = true;
    },
    end() {
      if (drawn) out.write("\n");
      drawn = false;
    },
  };
}
