/**
 * Turns a callback-style producer into an async generator: node-llama-cpp calls its chunk
 * callbacks synchronously from the evaluation loop and never waits for the consumer, so items
 * are buffered until pulled. Each yielded value is one callback's worth (never merged), and
 * the generator returns the producer's result or throws its error after the last item.
 */
export async function* bridge<T, R>(run: (emit: (item: T) => void) => Promise<R>): AsyncGenerator<T, R, void> {
  const buffer: T[] = [];
  let wake: (() => void) | undefined;
  let settled = false;

  const result = run((item) => {
    buffer.push(item);
    wake?.();
  });
  const settle = () => {
    settled = true;
    wake?.();
  };
  // Also observes a rejection, so it is not reported as unhandled while the consumer is busy.
  void result.then(settle, settle);

  while (true) {
    if (buffer.length > 0) {
      yield buffer.shift() as T;
      continue;
    }
    if (settled) return await result;
    await new Promise<void>((resolve) => (wake = resolve));
    wake = undefined;
  }
}
