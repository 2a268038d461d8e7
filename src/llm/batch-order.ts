/**
 * Which queued evaluations go into the next llama.cpp batch, how many tokens of each, and in what
 * order. node-llama-cpp calls this again at once for what is left, before any new step.
 *
 * One kind of work per batch, in this order:
 * 1. Prompts whose end is queued, which give a new reply its first token: a request that arrives
 *    while others decode waits only for the prompt, not also for a batch of their tokens.
 * 2. Running replies' next tokens.
 * 3. Chunks of a long prompt (decode.ts evaluates one per step): the running replies get their
 *    token of the step before the chunk is evaluated, and never wait for the whole prompt.
 * Mixing them would not save work: llama.cpp computes a batch that mixes sequences' token counts
 * as one piece of a token per sequence, then the rest (`split_equal`, below).
 * Within a kind, shorter items first while the batch has room.
 *
 * node-llama-cpp's own "maximumParallelism" meant to share the batch, but in 3.22.1 its second
 * pass hands a clipped item more than the batch holds (a 3,966-token prompt got 404 of 128
 * slots), and the batch is filled in order, so the prompt took every slot and the running replies
 * stalled until it was done.
 *
 * The chosen items then go into the batch in ascending sequence id. node-llama-cpp keeps a KV
 * cache per sequence (it never sets llama.cpp's `kv_unified`), and llama.cpp then computes a batch
 * in one piece only where its sequence ids go up one by one (`split_equal`, "sequential"): every
 * other piece reads all the weights again. In arrival order, four streams' 4-token batches were
 * computed as 3 + 1 or 2 + 2 and took 3.3 times a 1-token batch on bench-small (31 ms against
 * 10); llama-server, which adds its slots in order, took 2 times.
 */
import type { BatchItem, LlamaContext, PrioritizedBatchItem } from "node-llama-cpp";

interface Batch {
  items: readonly BatchItem[];
  size: number;
}

export type BatchStrategy = (batch: Batch) => PrioritizedBatchItem[];

/**
 * The strategy for `context()`, which is read at each batch: a context's strategy is passed to
 * `createContext`, before the context exists.
 */
export function batchOrder(context: () => LlamaContext | undefined): BatchStrategy {
  return (batch) => {
    const chosen = oneKind(batch);
    const ids = sequenceIds(context(), batch.items);
    if (ids) chosen.sort((a, b) => ids.get(a.item)! - ids.get(b.item)!);
    return chosen;
  };
}

/** 0: a prompt's end (its last token wants logits), 1: a reply's next token, 2: a prompt chunk. */
function kind(item: BatchItem): number {
  if (item.tokens.length === 1) return 1;
  return item.logits[item.tokens.length - 1] === true ? 0 : 2;
}

function oneKind({ items, size }: Batch): PrioritizedBatchItem[] {
  const kinds = items.map(kind);
  const first = Math.min(...kinds);
  const chosen: PrioritizedBatchItem[] = [];
  let left = size;
  for (const item of items.filter((_, i) => kinds[i] === first).sort((a, b) => a.tokens.length - b.tokens.length)) {
    if (left === 0) break;
    const processAmount = Math.min(item.tokens.length, left);
    chosen.push({ item, processAmount });
    left -= processAmount;
  }
  return chosen;
}

interface QueuedDecode {
  sequenceId: number;
  tokens: readonly unknown[];
}

/**
 * Each item's sequence id. A batch item does not carry it; node-llama-cpp builds the items from
 * its private queue, in order and with the same `tokens` arrays, just before it calls the strategy
 * (3.22.1, `LlamaContext._queuedDecodes`). Checked item by item: if that ever stops holding,
 * the order is left alone (slower, never wrong), and test/llm/batch-order.test.ts fails.
 */
export function sequenceIds(context: LlamaContext | undefined, items: readonly BatchItem[]): Map<BatchItem, number> | undefined {
  const queued = (context as unknown as { _queuedDecodes?: readonly QueuedDecode[] } | undefined)?._queuedDecodes;
  if (!Array.isArray(queued) || queued.length !== items.length) return undefined;
  const ids = new Map<BatchItem, number>();
  for (const [i, item] of items.entries()) {
    const decode = queued[i]!;
    if (decode.tokens !== item.tokens || typeof decode.sequenceId !== "number") return undefined;
    ids.set(item, decode.sequenceId);
  }
  return ids;
}
