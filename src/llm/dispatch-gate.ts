/**
 * Holds the context's next batch while a sequence's KV state is being saved or loaded
 * (`PARLEY_KV_CACHE_MB`): node-llama-cpp's `dispatchSchedule`.
 *
 * A request that takes a sequence from another conversation first saves that conversation's state,
 * and node-llama-cpp's `saveStateToFile` takes the context's lock, which a batch in flight holds.
 * Four conversations arriving together therefore went one by one: the first one's prompt was
 * dispatched as soon as its save ended, each later save waited for the batch before it (10–17 ms
 * of saving, 60–90 ms of waiting), and their first tokens came 120–250 ms apart. Held until the
 * saves in progress end, their prompts go out in one batch; replies already running lose nothing
 * they did not lose before, since the save would have taken the lock between two of their steps.
 */
export class DispatchGate {
  private pending = 0;
  private held: (() => void)[] = [];

  /**
   * Dispatches on the next cycle (node-llama-cpp's default), or once no state I/O is in progress.
   * Checked again on that cycle: a save that began in between holds the batch too, or the save
   * would wait for the whole batch it let through.
   */
  readonly schedule = (dispatch: () => void): void => {
    if (this.pending === 0) setImmediate(() => this.dispatchOrHold(dispatch));
    else this.held.push(dispatch);
  };

  private dispatchOrHold(dispatch: () => void): void {
    if (this.pending === 0) dispatch();
    else this.held.push(dispatch);
  }

  /** Runs `io` (a save or load of sequence state) with new batches held until all such I/O ends. */
  async hold<T>(io: () => Promise<T>): Promise<T> {
    this.pending++;
    try {
      return await io();
    } finally {
      if (--this.pending === 0) for (const dispatch of this.held.splice(0)) this.schedule(dispatch);
    }
  }
}
