/**
 * Keeps the busy sequences of one context in step, so that every step decodes the next token of
 * each of them in one llama.cpp batch (and a long prompt's next chunk right after it).
 *
 * node-llama-cpp already merges the evaluations queued in one tick into one batch, but a sequence
 * asks for its next token only after its sampled token has come back through a chain of promises,
 * and the context's dispatch loop starts the next batch with whatever is queued by then. Measured
 * with four streams: 169 of 174 batches held 3 tokens, never 4, so every fourth step cost a whole
 * extra decode. Here a sequence waits until each other generating sequence has its token too,
 * then all ask at once: 126 of 129 batches held 4.
 *
 * A sequence joins before its prompt: a long prompt is evaluated one chunk per step (decode.ts), so
 * the running sequences get a token in every step it takes instead of waiting for the whole prompt.
 * The prompt's end alone does not wait for a step (decode.ts).
 */
export class Lockstep {
  private members = 0;
  private waiting: (() => void)[] = [];

  /** A sequence starts its turn: from now on each step waits for it. */
  join(): Member {
    this.members++;
    let left = false;
    return {
      step: () =>
        new Promise<void>((resolve) => {
          this.waiting.push(resolve);
          this.releaseIfAllWait();
        }),
      leave: () => {
        if (left) return;
        left = true;
        this.members--;
        this.releaseIfAllWait();
      },
    };
  }

  private releaseIfAllWait(): void {
    if (this.waiting.length === 0 || this.waiting.length < this.members) return;
    for (const resolve of this.waiting.splice(0)) resolve();
  }
}

export interface Member {
  /** Resolves when every generating sequence is ready for its next token. */
  step(): Promise<void>;
  /** Idempotent: the sequence stopped generating, the others no longer wait for it. */
  leave(): void;
}
