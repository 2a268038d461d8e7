/**
 * Holds the context's next batch while a sequence is readied for a prompt: its KV state saved or
 * loaded (`PARLEY_KV_CACHE_MB`), what it holds beyond the prompt erased.
 *
 * A request that takes a sequence from another conversation first saves that conversation's state,
 * and node-llama-cpp's `saveStateToFile` takes the context's lock, which a batch in flight holds.
 * Four conversations arriving together therefore went one by one: the first one's prompt was
 * decoded as soon as its save ended, each later save waited for the batch before it (far longer
 * than the save itself), and their first tokens came far apart. Held until the
 * saves in progress end, their prompts go out in one batch; replies already running lose nothing
 * they did not lose before, since the save would have taken the lock between two of their steps.
 */
export class DispatchGate {
  private pending = 0;
  private waiting: (() => void)[] = [];
  private holding: (() => void)[] = [];

  /** Whether a sequence is being readied. */
  get held(): boolean {
    return this.pending > 0;
  }

  /** Calls `listener` as each hold begins: a batch in flight then holds the lock the hold needs. */
  onHold(listener: () => void): void {
    this.holding.push(listener);
  }

  /** Undefined when no sequence is being readied (the batch goes at once), else when none is. */
  open(): Promise<void> | undefined {
    if (this.pending === 0) return undefined;
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** Runs `io` (readying a sequence) with new batches held until all such work ends. */
  async hold<T>(io: () => Promise<T>): Promise<T> {
    this.pending++;
    for (const listener of this.holding) listener();
    try {
      return await io();
    } finally {
      if (--this.pending === 0) for (const resolve of this.waiting.splice(0)) resolve();
    }
  }
}
