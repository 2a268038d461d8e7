import { afterAll, beforeAll, beforeEach, expect, test } from "bun:test";
import { withLock } from "lifecycle-utils";
import { getLlama, type LlamaContext, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";
import { Scheduler, type Slot, SlotState } from "../../src/llm/scheduler";
import { promptEndsFor, samplingOf } from "../../src/llm/types";
import { checkInternals, sequenceIdOf } from "../../src/natives/addon";
import { allowSlowTests, eventLoopTurns, presetModel, runTurn } from "../support";

allowSlowTests();

// The scheduler drives node-llama-cpp's addon below its public API (src/natives/addon.ts). These tests
// watch the batches it hands the addon, and check that node-llama-cpp's sequences agree with what
// it did: the same tokens as node-llama-cpp's own evaluation, the same lock.

const CHUNK = 24;
let model: LlamaModel;
let context: LlamaContext;
let sequences: LlamaContextSequence[];
let scheduler: Scheduler;
let slots: readonly Slot[];
/** Each batch as the addon received it: per entry, the sequence id and its token count. */
const batches: [number, number][][] = [];

beforeAll(async () => {
  const llama = await getLlama({ gpu: false, build: "never" });
  model = await llama.loadModel({ modelPath: await presetModel("demo"), gpuLayers: 0 });
  context = await model.createContext({ contextSize: 512, sequences: 4, threads: 1, batchSize: CHUNK + 4 });
  sequences = Array.from({ length: 4 }, () => context.getSequence());
  const internal = context as unknown as { _ctx: Record<string, (...args: never[]) => unknown> };
  const addon = internal._ctx;
  internal._ctx = new Proxy(addon, {
    get(target, key) {
      // One step a batch, as with the npm prebuilt, whichever natives an earlier test file loaded:
      // these tests watch every batch (decode-steps.test.ts covers several steps a call).
      if (key === "decodeSteps") return undefined;
      const value = Reflect.get(target, key) as (...args: unknown[]) => unknown;
      if (typeof value !== "function") return value;
      if (key === "initBatch") return (...args: unknown[]) => (batches.push([]), value.apply(target, args));
      if (key === "addToBatch") {
        return (...args: unknown[]) => {
          batches.at(-1)!.push([args[0] as number, (args[2] as Uint32Array).length]);
          return value.apply(target, args);
        };
      }
      return value.bind(target);
    },
  });
  scheduler = new Scheduler(context, sequences, { promptChunk: CHUNK, promptEnds: "together" });
  slots = scheduler.slots;
});

beforeEach(async () => {
  for (const sequence of sequences) await sequence.clearHistory();
  batches.length = 0;
});

afterAll(async () => {
  await context.dispose();
  await model.dispose();
});

const promptOf = (length: number, seed: number): Token[] => {
  const words = model.tokenize(`the ${seed} tale of a ship that sailed the long grey sea to the end of every map`);
  return Array.from({ length }, (_, i) => words[(i + seed) % words.length]!);
};

/** A greedy turn on `runner` (the shared scheduler unless given): `input` after what the slot holds. */
function greedy(slot: Slot, input: Token[] | Promise<Token[]>, onToken: (token: Token) => boolean, signal = new AbortController().signal, runner = scheduler) {
  return runTurn(runner, slot, input, { sampling: samplingOf({ temperature: 0 }), signal, onToken });
}

/** A greedy turn that stops after `count` tokens or at the end of generation; `then` runs at its first. */
function turn(slot: Slot, input: Token[] | Promise<Token[]>, count: number, then?: () => void, runner = scheduler) {
  const tokens: Token[] = [];
  const done = greedy(
    slot,
    input,
    (token) => {
      if (tokens.length === 0) then?.();
      if (model.isEogToken(token)) return false;
      tokens.push(token);
      return tokens.length < count;
    },
    undefined,
    runner,
  );
  return done.then(() => tokens);
}

test("node-llama-cpp 3.22.1 has every internal the scheduler uses; an object without them is refused by name", () => {
  expect(() => checkInternals(context, model, sequences[0]!)).not.toThrow();
  expect(() => checkInternals({} as LlamaContext, model, sequences[0]!)).toThrow(/context\._ctx\.decodeBatch.*install the version package\.json pins/);
});

test("a prompt's end goes first, then the running replies in ascending sequence id, then one chunk per long prompt", async () => {
  const ids = sequences.map(sequenceIdOf);
  const [arriving, long, , running] = slots as [Slot, Slot, Slot, Slot];
  const joined: Promise<Token[]>[] = [];
  const first = turn(running, promptOf(5, 1), 4, () => {
    joined.push(turn(arriving, promptOf(3, 2), 3), turn(long, promptOf(2 * CHUNK + 4, 3), 2));
  });
  await first;
  await Promise.all(joined);
  expect(batches).toEqual([
    [[ids[3]!, 5]],
    [[ids[0]!, 3]],
    [[ids[1]!, CHUNK]],
    [
      [ids[0]!, 1],
      [ids[3]!, 1],
    ],
    [[ids[1]!, CHUNK]],
    [[ids[1]!, 4]],
    [
      [ids[0]!, 1],
      [ids[3]!, 1],
    ],
    [
      [ids[1]!, 1],
      [ids[3]!, 1],
    ],
  ]);
});

test("promptEnds together: while nothing replies, prompts wait for the slots still Preparing, so prompts arriving together share a batch; a reply never waits", async () => {
  const ids = sequences.map(sequenceIdOf);
  const fitted = Promise.withResolvers<Token[]>();
  const first = turn(slots[0]!, fitted.promise, 2);
  const second = turn(slots[1]!, promptOf(4, 11), 2);
  await eventLoopTurns();
  expect(batches).toEqual([]);
  expect(slots.map((slot) => slot.state)).toEqual([SlotState.Preparing, SlotState.Prompt, SlotState.Idle, SlotState.Idle]);
  fitted.resolve(promptOf(3, 10));
  await Promise.all([first, second]);
  expect(batches[0]).toEqual([
    [ids[0]!, 3],
    [ids[1]!, 4],
  ]);
  expect(slots.map((slot) => slot.state)).toEqual(Array(4).fill(SlotState.Idle));

  // A slot Preparing once a reply runs: the reply's batches go on, and the turn joins when its prompt comes.
  const late = Promise.withResolvers<Token[]>();
  let joining: Promise<Token[]> | undefined;
  const running = await turn(slots[2]!, promptOf(3, 12), 4, () => (joining = turn(slots[3]!, late.promise, 2)));
  expect(running).toHaveLength(4);
  late.resolve(promptOf(3, 13));
  expect(await joining!).toHaveLength(2);
});

test("promptEnds auto: together where every repeating layer runs on a GPU, shortest with any on the CPU; a named mode stays", () => {
  expect(promptEndsFor("auto", 23, 22)).toBe("together");
  expect(promptEndsFor("auto", 22, 22)).toBe("together");
  expect(promptEndsFor("auto", 21, 22)).toBe("shortest");
  expect(promptEndsFor("auto", 0, 22)).toBe("shortest");
  expect(promptEndsFor("shortest", 23, 22)).toBe("shortest");
  expect(promptEndsFor("together", 0, 22)).toBe("together");
});

test("promptEnds shortest: an end goes once it is ready; ends go one a batch, shortest first, but for ends of a few tokens, which share one", async () => {
  const ids = sequences.map(sequenceIdOf);
  const apart = new Scheduler(context, sequences, { promptChunk: CHUNK, promptEnds: "shortest" });
  const own = apart.slots;
  const fitted = Promise.withResolvers<Token[]>();
  const waiting = turn(own[0]!, fitted.promise, 2, undefined, apart);
  // Nothing replies, and the other slot's prompt is still being fitted: this one goes alone.
  expect(await turn(own[1]!, promptOf(4, 11), 2, undefined, apart)).toHaveLength(2);
  expect(batches[0]).toEqual([[ids[1]!, 4]]);
  fitted.resolve(promptOf(3, 10));
  await waiting;

  // Ends readied together, while a reply runs.
  const together = async (lengths: [number, number, number]) => {
    batches.length = 0;
    const joined: Promise<Token[]>[] = [];
    await turn(
      own[3]!,
      promptOf(5, 1),
      4,
      () => {
        for (const [i, length] of lengths.entries()) joined.push(turn(own[i]!, promptOf(length, 20 + i), 2, undefined, apart));
      },
      apart,
    );
    await Promise.all(joined);
    return batches.slice(1, 4);
  };
  const replies = ids.map((id): [number, number] => [id, 1]);
  expect(await together([20, 2, 3])).toEqual([
    [
      [ids[1]!, 2],
      [ids[2]!, 3],
    ],
    [[ids[0]!, 20]],
    replies,
  ]);
  expect(await together([20, 6, 5])).toEqual([[[ids[2]!, 5]], [[ids[1]!, 6]], [[ids[0]!, 20]]]);
  expect(own.map((slot) => slot.state)).toEqual(Array(4).fill(SlotState.Idle));
});

test("work on a sequence asked for outside any turn is done between two batches, and a prompt readied joins the batch right after it", async () => {
  const ids = sequences.map(sequenceIdOf);
  const [arriving, , spare, running] = slots as [Slot, Slot, Slot, Slot];
  await turn(spare, promptOf(4, 3), 2);
  batches.length = 0;
  let joined: Promise<Token[]> | undefined;
  let cleared: Promise<void> | undefined;
  await turn(running, promptOf(5, 1), 3, () => {
    cleared = scheduler.clear();
    joined = turn(arriving, promptOf(3, 2), 2);
  });
  await Promise.all([cleared, joined]);
  // The spare slot was idle: emptied. The running one was not.
  expect(spare.sequence.contextTokens).toEqual([]);
  expect(batches.slice(0, 3)).toEqual([
    [[ids[3]!, 5]],
    [[ids[0]!, 3]],
    [
      [ids[0]!, 1],
      [ids[3]!, 1],
    ],
  ]);
});

test("a turn's tokens are node-llama-cpp's own, and the sequence holds what was evaluated", async () => {
  const [mine, theirs] = sequences as [LlamaContextSequence, LlamaContextSequence];
  const input = promptOf(2 * CHUNK + 3, 4);
  const tokens = await turn(slots[0]!, input, 12);
  const expected: Token[] = [];
  for await (const token of theirs.evaluate(input, { temperature: 0 })) {
    expected.push(token);
    if (expected.length === 12) break;
  }
  expect(new Set(tokens).size).toBeGreaterThan(1);
  expect(tokens).toEqual(expected);
  // The token that ended the turn was sampled, never evaluated: the 12th, or the end of generation.
  const held = [...input, ...(tokens.length === 12 ? tokens.slice(0, -1) : tokens)];
  expect(mine.contextTokens).toEqual(held);
  expect(mine.nextTokenIndex).toBe(held.length);
});

test("batches take node-llama-cpp's own context lock, so its erasures and state files never run beside one", async () => {
  const [sequence] = sequences as [LlamaContextSequence];
  let erased = false;
  let erasing: Promise<unknown> | undefined;
  let running: Promise<Token[]> | undefined;
  await withLock([context, "context"], async () => {
    erasing = sequence.clearHistory().then(() => (erased = true));
    running = turn(slots[1]!, promptOf(4, 5), 2);
    await eventLoopTurns();
    expect([erased, batches.length]).toEqual([false, 0]);
  });
  await erasing;
  expect(await running).toHaveLength(2);
  expect(erased).toBe(true);
});

test("an aborted turn ends before its next batch, and a failed batch fails only its own turns", async () => {
  const controller = new AbortController();
  const seen: Token[] = [];
  await greedy(
    slots[0]!,
    promptOf(4, 6),
    (token) => {
      seen.push(token);
      if (seen.length === 2) controller.abort();
      return true;
    },
    controller.signal,
  );
  expect(seen).toHaveLength(2);
  const full = greedy(slots[1]!, promptOf(600, 7), () => true);
  const fine = turn(slots[2]!, promptOf(4, 8), 1);
  await expect(full).rejects.toThrow("context is full");
  expect(await fine).toHaveLength(1);
});

test("disposing a context mid-turn waits for the batch in flight, then ends the turn with an error", async () => {
  const own = await model.createContext({ contextSize: 256, sequences: 1, threads: 1, batchSize: CHUNK + 1 });
  const runner = new Scheduler(own, [own.getSequence()], { promptChunk: CHUNK });
  let disposing: Promise<void> | undefined;
  let tokens = 0;
  const running = greedy(
    runner.slots[0]!,
    promptOf(4, 9),
    () => {
      if (++tokens === 3) disposing = own.dispose();
      return true;
    },
    undefined,
    runner,
  );
  await expect(running).rejects.toThrow();
  await disposing;
  expect([tokens, own.disposed]).toEqual([3, true]);
});
