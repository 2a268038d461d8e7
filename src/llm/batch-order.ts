/**
 * Which queued evaluations go into the next llama.cpp batch, and how many tokens of each.
 *
 * A running reply's next token goes first, always: then a long prompt is evaluated in chunks of
 * what the batch has left, and the streams already running keep receiving a token per step
 * instead of waiting for the whole prompt. Shorter prompts go before longer ones, so a short
 * question is not stuck behind a long one.
 *
 * node-llama-cpp's own "maximumParallelism" meant to share the batch, but in 3.22.1 its second
 * pass hands a clipped item more than the batch holds (a 3,966-token prompt got 404 of 128
 * slots), and the batch is filled in order, so the prompt took every slot and the running replies
 * stalled until it was done.
 */
import type { BatchItem, PrioritizedBatchItem } from "node-llama-cpp";

export function decodeFirst({ items, size }: { items: readonly BatchItem[]; size: number }): PrioritizedBatchItem[] {
  const chosen: PrioritizedBatchItem[] = [];
  let left = size;
  for (const item of [...items].sort((a, b) => a.tokens.length - b.tokens.length)) {
    if (left === 0) break;
    const processAmount = Math.min(item.tokens.length, left);
    chosen.push({ item, processAmount });
    left -= processAmount;
  }
  return chosen;
}
