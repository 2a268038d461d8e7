import { afterAll, beforeAll, beforeEach, expect, test } from "bun:test";
import { getLlama, type BatchItem, type LlamaContext, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";
import { batchOrder, sequenceIds } from "../../src/llm/batch-order";
import { presetModel } from "../support";

// llama.cpp computes a batch in one piece only where its sequence ids ascend one by one, so the
// strategy orders the batch by sequence id. Batch items do not carry it: it is read from
// node-llama-cpp's private queue, and these tests are what notices when an upgrade changes that.

let model: LlamaModel;
let context: LlamaContext;
let sequences: [LlamaContextSequence, LlamaContextSequence, LlamaContextSequence];
let ids: number[];
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
        const queuedIds = sequenceIds(context, batch.items);
        const idOf = (item: BatchItem) => queuedIds?.get(item);
        const chosen = order(batch);
        batches.push({ queued: batch.items.map(idOf), ordered: chosen.map(({ item }) => idOf(item)) });
        return chosen;
      },
    },
  });
  sequences = [context.getSequence(), context.getSequence(), context.getSequence()];
  ids = sequences.map((sequence) => (sequence as unknown as { _sequenceId: number })._sequenceId);
});

beforeEach(async () => {
  for (const sequence of sequences) await sequence.clearHistory();
  batches.length = 0;
});

afterAll(async () => {
  await context.dispose();
  await model.dispose();
});

test("a batch queued out of sequence order is decoded in ascending sequence ids, every item whole", async () => {
  const [first, second, third] = sequences;
  // Queued in one tick, last sequence first: node-llama-cpp batches them together.
  const prompts = ["the third one", "a first prompt here", "second"].map((text) => model.tokenize(text));
  await Promise.all([third, first, second].map((sequence, i) => sequence.evaluateWithoutGeneratingNewTokens(prompts[i]!)));

  expect(batches).toHaveLength(1);
  expect(batches[0]!.queued).toEqual([ids[2], ids[0], ids[1]]);
  expect(batches[0]!.ordered).toEqual([...ids].sort((a, b) => a - b));
  expect([first, second, third].map((sequence) => sequence.nextTokenIndex)).toEqual([prompts[1]!.length, prompts[2]!.length, prompts[0]!.length]);
});

test("a prompt's end goes alone and first, then the running replies' tokens, then prompt chunks", async () => {
  const [running, arriving, long] = sequences;
  await running.evaluateWithoutGeneratingNewTokens(model.tokenize("a reply so far"));
  batches.length = 0;
  const firstToken = arriving.evaluate(model.tokenize("a new question"), { temperature: 0 });
  await Promise.all([
    long.evaluateWithoutGeneratingNewTokens(model.tokenize("the first chunk of a long prompt")),
    running.evaluateWithoutGeneratingNewTokens(model.tokenize("next").slice(0, 1)),
    firstToken.next(),
  ]);
  await firstToken.return();
  expect(batches.map(({ ordered }) => ordered)).toEqual([[ids[1]], [ids[0]], [ids[2]]]);
});

test("within a kind, shorter items first while the batch has room; without the queue to read, in that order", () => {
  const item = (length: number, end = false): BatchItem => {
    const logits: (true | undefined)[] = [];
    if (end) logits[length - 1] = true;
    return { tokens: Array.from({ length }, () => 1 as Token), logits, evaluationPriority: 5 };
  };
  const choose = (items: BatchItem[], size: number) =>
    batchOrder(() => undefined)({ items, size }).map(({ item, processAmount }) => [items.indexOf(item), processAmount]);
  const [chunk, token, end, shortEnd] = [item(40), item(1), item(10, true), item(5, true)];
  expect(sequenceIds(undefined, [chunk])).toBeUndefined();
  expect(choose([chunk, token, end, shortEnd], 12)).toEqual([[3, 5], [2, 7]]);
  expect(choose([chunk, token, item(1)], 12)).toEqual([[1, 1], [2, 1]]);
  expect(choose([chunk, item(20)], 30)).toEqual([[1, 20], [0, 10]]);
});
