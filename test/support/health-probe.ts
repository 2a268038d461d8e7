/**
 * What another client sees of a server while it works: `/healthz` asked one request after another,
 * every answer's latency kept, so that a stall anywhere in the server's event loop shows as the
 * latency of the probe it held up.
 */
import { quantile } from "./stats";
import { until } from "./wait";

export interface HealthSample {
  /** When it was asked (performance.now()). */
  at: number;
  ms: number;
  /** 0: no answer within the probe's timeout, or the connection failed. */
  status: number;
}

/** p50, p99 and the worst of some samples' latencies, and how many there were. */
export interface Latencies {
  count: number;
  p50: number;
  p99: number;
  max: number;
}

export const latencies = (samples: readonly HealthSample[]): Latencies => {
  const ms = samples.map((sample) => sample.ms);
  return { count: ms.length, p50: quantile(ms, 0.5), p99: quantile(ms, 0.99), max: quantile(ms, 1) };
};

export const describeLatencies = ({ count, p50, p99, max }: Latencies) =>
  `${count} probes, p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms, max ${max.toFixed(1)} ms`;

export class HealthProbe {
  readonly samples: HealthSample[] = [];
  private running = true;
  /** Ends the probe in flight at `stop`: a server that stopped answering must not hold the test up. */
  private readonly stopped = new AbortController();
  private readonly loop: Promise<void>;

  /** Asks `url`/healthz at most once every `everyMs`, the next once the last is answered; each gets `timeoutMs`. */
  constructor(
    private readonly url: string,
    private readonly everyMs = 20,
    private readonly timeoutMs = 120_000,
  ) {
    this.loop = this.run();
  }

  /** `work`'s value, and the probes in flight while it ran, each answered (or timed out) by then. */
  async during<T>(work: () => Promise<T>): Promise<{ value: T; samples: HealthSample[] }> {
    const from = performance.now();
    const value = await work();
    const to = performance.now();
    // Probes go one at a time: once one asked after `to` is answered, every one asked before is.
    await until(() => (this.samples.at(-1)?.at ?? 0) > to, "a /healthz probe asked after the work", this.timeoutMs + 5_000);
    // Those in flight at any time while it ran: a probe asked just before the work began waits for it too.
    return { value, samples: this.samples.filter((sample) => sample.at <= to && sample.at + sample.ms >= from) };
  }

  async stop(): Promise<void> {
    this.running = false;
    this.stopped.abort();
    await this.loop;
  }

  private async run(): Promise<void> {
    while (this.running) {
      const at = performance.now();
      let status = 0;
      try {
        const response = await fetch(`${this.url}/healthz`, { signal: AbortSignal.any([AbortSignal.timeout(this.timeoutMs), this.stopped.signal]) });
        await response.arrayBuffer();
        status = response.status;
      } catch {
        // No answer: its time is what the samples say.
      }
      this.samples.push({ at, ms: performance.now() - at, status });
      const pause = at + this.everyMs - performance.now();
      // Pacing, not waiting on a condition: the probe asks at a steady rate.
      if (pause > 0 && this.running) await Bun.sleep(pause);
    }
  }
}
