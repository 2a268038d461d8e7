/**
 * One FIFO lock per key: turns of one conversation run one at a time, in arrival order,
 * while different conversations proceed independently. Entries vanish when idle.
 */
export class KeyedLock {
  private readonly tails = new Map<string, Promise<void>>();

  /** Resolves to a release function once every earlier holder of `key` has released. */
  async acquire(key: string, signal?: AbortSignal): Promise<() => void> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    const tail = previous.then(() => mine);
    this.tails.set(key, tail);
    const done = () => {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    };
    if (!signal) {
      await previous;
      return done;
    }
    // A waiter that gives up must still pass the lock on, or everyone behind it waits forever.
    const aborted = new Promise<"aborted">((resolve) => {
      if (signal.aborted) resolve("aborted");
      else signal.addEventListener("abort", () => resolve("aborted"), { once: true });
    });
    if ((await Promise.race([previous.then(() => "ready" as const), aborted])) === "aborted") {
      previous.then(done);
      throw signal.reason instanceof Error ? signal.reason : new DOMException("aborted", "AbortError");
    }
    return done;
  }

  get size(): number {
    return this.tails.size;
  }
}
