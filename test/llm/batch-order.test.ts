import { afterAll, beforeAll, expect, test } from "bun:test";
import { getLlama, type BatchItem, type LlamaContext, type LlamaModel, type Token } from "node-llama-cpp";
import { batchOrder, sequenceIds } from "../../src/llm/batch-order";
import { presetModel } from "../support";

// llama.cpp computes a batch in one piece only where its sequence ids ascend one by one, so the
// strategy orders the batch by sequence id. Batch items do not carry it: it is read from
// node-llama-cpp's private queue, and these tests are what notices when an upgrade changes that.

let model: LlamaModel;
let context: LlamaContext;
/** Per batch: the sequence ids of the items as queued, and as the strategy put them. */
const batches: { queued: (number | undefined)[]; ordered: (number | undefined)[] }[] = [];

beforeAll(async () => {
  const llama = await getLlama({ gpu: false, build: "never" });
  model = await llama.loadModel({ modelPath: await presetModel("demo"), gpuLayers: 0 });
  const order = batchOrder(() => context);
  context = await model.createContext({
    contextSize: 512,
    sequences: 3,
    threads: 1,
    batching: {
      itemPrioritizationStrategy: (batch) => {
        const ids = sequenceIds(context, batch.items);
        const idOf = (item: BatchItem) => ids?.get(item);
        const chosen = order(batch);
        batches.push({ queued: batch.items.map(idOf), ordered: chosen.map(({ item }) => idOf(item)) });
        return chosen;
      },
    },
  });
});

afterAll(async () => {
  await context.dispose();
  await model.dispose();
});

test("a batch queued out of sequence order is decoded in ascending sequence ids, every item whole", async () => {
  const [first, second, third] = [context.getSequence(), context.getSequence(), context.getSequence()];
  const ids = [first, second, third].map((sequence) => (sequence as unknown as { _sequenceId: number })._sequenceId);
  // Queued in one tick, last sequence first: node-llama-cpp batches them together.
  const prompts = ["the third one", "a first prompt here", "second"].map((text) => model.tokenize(text));
  await Promise.all([third, first, second].map((sequence, i) => sequence.evaluateWithoutGeneratingNewTokens(prompts[i]!)));

  expect(batches).toHaveLength(1);
  expect(batches[0]!.queued).toEqual([ids[2], ids[0], ids[1]]);
  expect(batches[0]!.ordered).toEqual([...ids].sort((a, b) => a - b));
  expect([first, second, third].map((sequence) => sequence.nextTokenIndex)).toEqual([prompts[1]!.length, prompts[2]!.length, prompts[0]!.length]);
});

test("without the queue to read, the strategy still chooses (in its own order)", () => {
  const item = (length: number): BatchItem => ({ tokens: Array.from({ length }, () => 1 as Token), logits: [], evaluationPriority: 5 });
  const items = [item(40), item(1), item(10)];
  expect(sequenceIds(undefined, items)).toBeUndefined();
  const chosen = batchOrder(() => undefined)({ items, size: 30 });
  expect(chosen.map(({ item, processAmount }) => [items.indexOf(item), processAmount])).toEqual([[1, 1], [2, 10], [0, 19]]);
});
