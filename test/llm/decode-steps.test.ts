/**
 * Running replies with nothing else to decode take several steps a native call
 * (src/natives/decode-steps.cpp, added to the addon by Parley's compiled natives): the same tokens
 * as one step a batch, the same sequences afterwards however the replies end, and a turn arriving
 * meanwhile aborts them, leaving every sequence as its recorded steps say. Skipped without
 * compiled natives (`bun run natives`); CI compiles them, and there a skip is a failure.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { getLlama, type LlamaContext, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";
import { Scheduler } from "../../src/llm/scheduler";
import { samplingOf } from "../../src/llm/types";
import { abortSteps, decodeBatch, decodeSteps, Sampler, type StepsEntry, sequenceIdOf } from "../../src/natives/addon";
import { allowSlowTests, compiledNatives, endlessSampler, presetModel, runTurn, until, withSeed } from "../support";

allowSlowTests();

const natives = await compiledNatives();

interface Addon {
  decodeSteps(
    sequenceIds: unknown,
    positions: unknown,
    tokens: unknown,
    samplers: unknown,
    limits: unknown,
    steps: unknown,
    draftLengths?: unknown,
    histories?: unknown,
  ): Promise<Int32Array>;
  abortSteps(): void;
  initBatch(size: number): void;
  addToBatch(sequenceId: number, firstTokenSequenceIndex: number, tokens: Uint32Array, logitIndexes: Uint32Array): Uint32Array;
  decodeBatch(): Promise<void>;
  removeTokenCellsFromSequence(sequenceId: number, start: number, end: number): void;
  getSequenceKvCacheMaxPosition(sequenceId: number): number;
}

/** A one-sequence call's tokens, from the addon's answer (its counts first). */
const tokensOf = (answer: Int32Array) => [...answer.subarray(5, 5 + answer[0]!)];

/** The object's property, its methods bound to it: a proxy's caller would otherwise be their `this`. */
function bound(target: object, key: string | symbol): unknown {
  const value = Reflect.get(target, key) as unknown;
  return typeof value === "function" ? value.bind(target) : value;
}

/** The context as the npm prebuilt leaves it, without decodeSteps: one step a batch. */
function stepwiseOf(context: LlamaContext): LlamaContext {
  const hidden = new Proxy((context as unknown as { _ctx: Addon })._ctx, { get: (target, key) => (key === "decodeSteps" ? undefined : bound(target, key)) });
  return new Proxy(context, { get: (target, key) => (key === "_ctx" ? hidden : Reflect.get(target, key)) });
}

describe.skipIf(natives === undefined)("replies stepping (compiled natives)", () => {
  let model: LlamaModel;
  let context: LlamaContext;
  let sequences: LlamaContextSequence[];
  let addon: Addon;
  let aborts = 0;
  /** Each decodeSteps call's most tokens a reply may take (its steps, or a reply's limit if fewer). */
  const stepCounts: number[] = [];
  /** Each drafting sequence's tokens a decodeSteps call was handed, and the tokens its sequence held then. */
  const histories: { history: number[]; held: number[] }[] = [];
  /** Called right after each decodeSteps call has begun, until it returns true. */
  let onStepsCall: (() => boolean) | undefined;
  /** The same context seen without the steps, as with the npm prebuilt: one step a batch. */
  let stepwise: LlamaContext;

  beforeAll(async () => {
    const llama = await getLlama({ gpu: false, build: "never" });
    model = await llama.loadModel({ modelPath: await presetModel("demo"), gpuLayers: 0 });
    context = await model.createContext({ contextSize: 1024, sequences: 2, threads: 1 });
    sequences = Array.from({ length: 2 }, () => context.getSequence());
    const internal = context as unknown as { _ctx: Addon };
    addon = internal._ctx;
    internal._ctx = new Proxy(addon, {
      get: (target, key) => {
        if (key === "abortSteps") return () => (aborts++, target.abortSteps());
        if (key === "decodeSteps") {
          return (...args: Parameters<Addon["decodeSteps"]>) => {
            for (const [i, history] of ((args[7] as Uint32Array[] | undefined) ?? []).entries()) {
              const sequence = sequences.find((sequence) => sequenceIdOf(sequence) === (args[0] as number[])[i]);
              if (history.length > 0) histories.push({ history: [...history], held: [...(sequence?.contextTokens ?? [])] });
            }
            const call = target.decodeSteps(...args);
            stepCounts.push(Math.min(args[5] as number, ...(args[4] as number[])));
            if (onStepsCall?.()) onStepsCall = undefined;
            return call;
          };
        }
        return bound(target, key);
      },
    });
    stepwise = stepwiseOf(context);
  });

  beforeEach(async () => {
    for (const sequence of sequences) await sequence.clearHistory();
  });

  afterAll(async () => {
    await context.dispose();
    await model.dispose();
  });

  // The demo model ends most replies within a few tokens; these prompts and seeds run long.
  // Its end of turn (<|im_end|>, the demo's token 4) all but never drawn: it runs as long as it is let.
  const LONG = { text: "the sea is", sampling: { temperature: 0.9, seed: 31, logitBias: { 4: -100 } } };
  const OTHER = { text: "what is the weather like", sampling: { temperature: 0.9, seed: 35 } };

  /**
   * A turn on `sequence` that takes at most `count` tokens (its last unevaluated), or stops at the
   * end of generation; the scheduler is told the count only with `declared`.
   */
  function reply(
    scheduler: Scheduler,
    sequence: LlamaContextSequence,
    input: Token[],
    count: number,
    sampling: { temperature: number; seed?: number; logitBias?: Record<number, number> },
    declared = false,
  ) {
    const tokens: Token[] = [];
    const slot = scheduler.slots.find((slot) => slot.sequence === sequence)!;
    const done = runTurn(scheduler, slot, input, {
      sampling: samplingOf(sampling),
      ...(declared ? { maxTokens: count } : {}),
      onToken: (token) => {
        if (model.isEogToken(token)) return false;
        return tokens.push(token) < count;
      },
    });
    return { tokens, done };
  }

  test("the addon has the methods", () => {
    expect(model.tokenize("<|im_end|>", true)).toEqual([4 as Token]);
    expect(typeof addon.decodeSteps).toBe("function");
    expect(typeof addon.abortSteps).toBe("function");
  });

  test("the same tokens as one step a batch, and the same sequence after, whether the reply ends at its end of generation or mid-call", async () => {
    const cases = [
      // Greedy, this reply samples its end of generation as its eighth token.
      { text: "tell me about the hills", sampling: { temperature: 0 }, count: 100, length: 7 },
      // 10 tokens: the third call of 4 steps decoded two tokens past the reply's end.
      { ...LONG, count: 10, length: 10 },
    ];
    for (const { text, sampling, count, length } of cases) {
      const outcomes = [];
      for (const ctx of [context, stepwise]) {
        const [sequence] = sequences;
        await sequence!.clearHistory();
        const scheduler = new Scheduler(ctx, sequences, { promptChunk: 16 });
        const first = reply(scheduler, sequence!, model.tokenize(text), count, sampling);
        await first.done;
        const held = [...sequence!.contextTokens];
        // A next turn on the same sequence reads every cell it holds: stray ones would change it.
        const second = reply(scheduler, sequence!, [first.tokens.at(-1)!, ...model.tokenize(LONG.text)], 12, LONG.sampling);
        await second.done;
        outcomes.push({ first: first.tokens, held, second: second.tokens });
      }
      expect(outcomes[0]!.first).toHaveLength(length);
      expect(outcomes[0]!.second.length).toBeGreaterThan(4);
      expect(outcomes[0]).toEqual(outcomes[1]!);
    }
  });

  test("replies stepping together: each gets the tokens and leaves the sequence it would one step a batch, one ending at its end of generation, one mid-call, one running on alone", async () => {
    const turns = [
      // Greedy, its end of generation as its eighth token: the call ends after that step for all.
      { text: "tell me about the hills", sampling: { temperature: 0 }, count: 100 },
      { ...LONG, count: 10 },
      // Its end of generation as its eighteenth token, the last seven alone.
      { ...OTHER, count: 30 },
    ];
    const many = await model.createContext({ contextSize: 1024, sequences: turns.length, threads: 1 });
    try {
      const own = Array.from({ length: turns.length }, () => many.getSequence());
      const outcomes = [];
      for (const ctx of [many, stepwiseOf(many)]) {
        for (const sequence of own) await sequence.clearHistory();
        const scheduler = new Scheduler(ctx, own, { promptChunk: 16 });
        const firsts = turns.map(({ text, sampling, count }, i) => reply(scheduler, own[i]!, model.tokenize(text), count, sampling));
        await Promise.all(firsts.map(({ done }) => done));
        const held = own.map((sequence) => [...sequence.contextTokens]);
        // Next turns on the same sequences read every cell they hold: stray ones would change them.
        const seconds = own.map((sequence, i) => reply(scheduler, sequence, [firsts[i]!.tokens.at(-1)!, ...model.tokenize(LONG.text)], 12, LONG.sampling));
        await Promise.all(seconds.map(({ done }) => done));
        outcomes.push({ firsts: firsts.map(({ tokens }) => tokens), held, seconds: seconds.map(({ tokens }) => tokens) });
      }
      expect(outcomes[0]!.firsts.map((tokens) => tokens.length)).toEqual([7, 10, 17]);
      expect(outcomes[0]).toEqual(outcomes[1]!);
    } finally {
      await many.dispose();
    }
  });

  test("abortSteps ends the calls begun before it within their step, leaving the sequences as the steps before it left them; a call begun after it runs whole; one call a context at a time", async () => {
    const prompted = await Promise.all(
      sequences.map(async (sequence) => {
        const sampler = endlessSampler(context, model);
        const [sampled] = await decodeBatch(context, [{ sequence, tokens: model.tokenize(LONG.text), sampler }]);
        return { sequence, sampler, token: sampled!.token, position: sequence.nextTokenIndex, id: sequenceIdOf(sequence) };
      }),
    );
    type Prompted = (typeof prompted)[number];
    const call = ({ id, position, token, sampler }: Prompted, steps: number, after: readonly number[] = [], on: Addon = addon) =>
      on.decodeSteps([id], [position + after.length], [after.at(-1) ?? token], [sampler.native], [steps], steps).then(tokensOf);
    const [first, second] = prompted as [Prompted, Prompted];
    const most = context.contextSize - 1 - Math.max(first.position, second.position) - 8;
    // Another context's call holds the one decode thread: a call queued behind it is aborted before it begins.
    const other = await model.createContext({ contextSize: 1024, sequences: 1, threads: 1 });
    const otherSequence = other.getSequence();
    const otherSampler = endlessSampler(other, model);
    try {
      const [otherSampled] = await decodeBatch(other, [{ sequence: otherSequence, tokens: model.tokenize(LONG.text), sampler: otherSampler }]);
      const blocking = (other as unknown as { _ctx: Addon })._ctx.decodeSteps(
        [0],
        [otherSequence.nextTokenIndex],
        [otherSampled!.token],
        [otherSampler.native],
        [most],
        most,
      );
      // The call through addon.ts begins after the abort: it decodes nothing, and its sequence holds what it held.
      const held = { next: second.sequence.nextTokenIndex, tokens: [...second.sequence.contextTokens] };
      onStepsCall = () => (addon.abortSteps(), true);
      const [none] = await decodeSteps(context, [{ ...second, limit: most }], () => most);
      expect(tokensOf(await blocking).length).toBeLessThan(most);
      expect(none).toEqual({ tokens: [], drafted: 0, accepted: 0, tried: 0, right: 0 });
      expect({ next: second.sequence.nextTokenIndex, tokens: second.sequence.contextTokens }).toEqual(held);
      // A second call on a context while one is out is refused, whatever its sequences.
      const running = call(first, most);
      expect(() => call(second, 4)).toThrow(/still out/);
      addon.abortSteps();
      const cut = await running;
      expect(cut.length).toBeLessThan(most);
      // The sequence holds the steps before the abort and none of the aborted one: it goes on
      // from there (llama.cpp refuses a position it holds) as it would have unaborted.
      const more = await call(first, 8, cut);
      addon.removeTokenCellsFromSequence(first.id, first.position, -1);
      expect([...cut, ...more]).toEqual([...(await call(first, cut.length + 8))]);
      expect(await call(second, 40)).toHaveLength(40);
    } finally {
      for (const { id, position, sampler } of prompted) {
        addon.removeTokenCellsFromSequence(id, position, -1);
        sampler.dispose();
      }
      otherSampler.dispose();
      await other.dispose();
    }
  });

  test(
    "sequences 0 and 2 stepping on bench-small, aborted at random moments: each holds its recorded tokens and no cell past them",
    withSeed(async (random) => {
      // llama.cpp computes a batch of non-consecutive sequence ids in pieces (ubatches) and, aborted,
      // takes back only the piece it was computing; bench-small's steps are long enough for an abort
      // to land inside either piece.
      const small = await model.llama.loadModel({ modelPath: await presetModel("bench-small"), gpuLayers: 0 });
      const three = await small.createContext({ contextSize: 2048, sequences: 3, threads: 2 });
      const [first, idle, third] = Array.from({ length: 3 }, () => three.getSequence());
      const entries: StepsEntry[] = [];
      try {
        for (const sequence of [first!, third!]) {
          const sampler = endlessSampler(three, small);
          entries.push({ sequence, token: 0 as Token, sampler, limit: 200 });
          const [sampled] = await decodeBatch(three, [{ sequence, tokens: small.tokenize("the sea is calm tonight"), sampler }]);
          entries.at(-1)!.token = sampled!.token;
        }
        const positions = (three as unknown as { _ctx: Addon })._ctx;
        const held = () =>
          entries.map(({ sequence }) => ({
            id: sequenceIdOf(sequence),
            next: sequence.nextTokenIndex,
            last: positions.getSequenceKvCacheMaxPosition(sequenceIdOf(sequence)),
          }));
        expect(sequenceIdOf(idle!)).toBe(1);
        for (let trial = 0; trial < 24; trial++) {
          // A step of two sequences takes a few ms here: the abort lands anywhere in the first few.
          const timer = setTimeout(() => abortSteps(three), random.int(1, 25));
          const tokens = await decodeSteps(three, entries, () => 200);
          clearTimeout(timer);
          for (const [i, entry] of entries.entries()) entry.token = tokens[i]!.tokens.at(-1) ?? entry.token;
          expect(held()).toEqual(held().map(({ id, next }) => ({ id, next, last: next - 1 })));
        }
        // And they go on stepping from there.
        const more = await decodeSteps(three, entries, () => 4);
        expect(more.map(({ tokens }) => tokens.length)).toEqual([4, 4]);
      } finally {
        for (const { sampler } of entries) sampler.dispose();
        await three.dispose();
        await small.dispose();
      }
    }),
    30_000,
  );

  test("a reply's maxTokens bounds the calls: none steps past its last token, and the reply is the same", async () => {
    const [sequence] = sequences;
    const outcomes = [];
    for (const declared of [false, true]) {
      await sequence!.clearHistory();
      stepCounts.length = 0;
      // The reply's tokens handed out as each call begins.
      const handed: number[] = [];
      onStepsCall = () => (handed.push(turn.tokens.length), false);
      const turn = reply(new Scheduler(context, sequences, { promptChunk: 16 }), sequence!, model.tokenize(LONG.text), 10, LONG.sampling, declared);
      await turn.done;
      onStepsCall = undefined;
      outcomes.push({ tokens: turn.tokens, held: [...sequence!.contextTokens], stepCounts: [...stepCounts], handed });
    }
    const [undeclared, declared] = outcomes as [(typeof outcomes)[number], (typeof outcomes)[number]];
    expect(declared.tokens).toHaveLength(10);
    expect(declared.tokens).toEqual(undeclared.tokens);
    expect(declared.held).toEqual(undeclared.held);
    // The first token comes from the prompt's batch, the other nine from the calls. Undeclared, the
    // end comes as a surprise: the next call is under way by then (begun as the third's tokens were
    // handed out), and is aborted and taken back.
    expect(undeclared.stepCounts).toEqual([4, 4, 4, 4]);
    expect(declared.stepCounts).toEqual([4, 4, 1]);
    // Each call after the first begins before the tokens of the one before are handed out.
    expect(declared.handed).toEqual([1, 1, 5]);
  });

  test("tokens a reply forces (after its prompt, and at mayForceAt) are evaluated as its own: the calls stop where it may force, and the reply is the one it gets one step a batch", async () => {
    const [sequence] = sequences;
    const input = model.tokenize(LONG.text);
    const [a, b, c, d] = model.tokenize(" a ship sailed");
    const FORCE_AT = 5;
    const outcomes = [];
    for (const context_ of [context, stepwise]) {
      await sequence!.clearHistory();
      stepCounts.length = 0;
      const scheduler = new Scheduler(context_, sequences, { promptChunk: 16 });
      const given: Token[] = [];
      let forcing = true;
      await scheduler.run({
        slot: scheduler.slots.find((slot) => slot.sequence === sequence)!,
        scope: "",
        prompt: () => ({ tokens: input, reusable: 0 }),
        sampling: samplingOf(LONG.sampling),
        signal: new AbortController().signal,
        onPrompt: () => [a!, b!],
        mayForceAt: () => (forcing ? FORCE_AT : Infinity),
        onToken: (token) => {
          if (model.isEogToken(token)) return false;
          given.push(token);
          if (given.length === FORCE_AT && forcing) {
            forcing = false;
            return [c!, d!];
          }
          return given.length < 14;
        },
      });
      outcomes.push({ given, held: [...sequence!.contextTokens], stepCounts: [...stepCounts] });
    }
    const [stepped, alone] = outcomes as [(typeof outcomes)[number], (typeof outcomes)[number]];
    // Past the forced tokens, sampling went on.
    expect(stepped.given.length).toBeGreaterThan(FORCE_AT + 2);
    expect(stepped.given.slice(0, 2)).toEqual([a!, b!]);
    expect(stepped.given.slice(FORCE_AT, FORCE_AT + 2)).toEqual([c!, d!]);
    expect(stepped.given).toEqual(alone.given);
    // The sequence holds the prompt, then every token given: but the 14th, which ended the reply unevaluated.
    expect(stepped.held).toEqual([...input, ...(stepped.given.length === 14 ? stepped.given.slice(0, -1) : stepped.given)]);
    expect(alone.held).toEqual(stepped.held);
    // The prompt's batch samples the third token; a call then takes the fourth and fifth and stops
    // where the reply may force; the forced tokens go in a batch, which samples the eighth.
    expect(stepped.stepCounts[0]).toBe(2);
    expect(stepped.stepCounts.slice(1).every((count) => count === 4)).toBe(true);
  });

  /** The reply's tokens one step a batch, with nothing beside it. */
  async function alone(
    sequence: LlamaContextSequence,
    { text, sampling }: { text: string; sampling: typeof LONG.sampling | typeof OTHER.sampling },
    count: number,
  ) {
    await sequence.clearHistory();
    const turn = reply(new Scheduler(stepwise, sequences, { promptChunk: 16 }), sequence, model.tokenize(text), count, sampling);
    await turn.done;
    return turn.tokens;
  }

  test("work for the loop (a task) aborts the replies' call, and the reply gets the tokens it gets alone", async () => {
    const [lone] = sequences;
    const expected = await alone(lone!, LONG, 30);
    await lone!.clearHistory();
    const scheduler = new Scheduler(context, sequences, { promptChunk: 16 });
    const before = aborts;
    const asked = Promise.withResolvers<void>();
    // Once the reply has streamed a while, the other (idle) slot is emptied during one of its calls.
    onStepsCall = () => first.tokens.length >= 8 && (asked.resolve(scheduler.clear()), true);
    // Declared, the reply's end aborts nothing: the one abort is the task's.
    const first = reply(scheduler, lone!, model.tokenize(LONG.text), 30, LONG.sampling, true);
    await Promise.race([asked.promise, first.done.then(() => Promise.reject(new Error("the reply ended before the task was asked for")))]);
    await first.done;
    expect(aborts).toBe(before + 1);
    expect(first.tokens).toEqual(expected);
  });

  test("a turn arriving while a reply decodes alone aborts its call, and both get the tokens they get alone", async () => {
    const [lone, other] = sequences;
    const expected = [await alone(lone!, LONG, 30), await alone(other!, OTHER, 12)];
    for (const sequence of sequences) await sequence.clearHistory();
    const scheduler = new Scheduler(context, sequences, { promptChunk: 16 });
    const before = aborts;
    const arrived = Promise.withResolvers<ReturnType<typeof reply>>();
    // Once the lone reply has streamed a while, the next turn arrives during one of its calls.
    onStepsCall = () => first.tokens.length >= 8 && (arrived.resolve(reply(scheduler, other!, model.tokenize(OTHER.text), 12, OTHER.sampling, true)), true);
    const first = reply(scheduler, lone!, model.tokenize(LONG.text), 30, LONG.sampling, true);
    const second = await Promise.race([arrived.promise, first.done.then(() => Promise.reject(new Error("the lone reply ended before a turn could arrive")))]);
    await Promise.all([first.done, second.done]);
    expect(aborts).toBe(before + 1);
    expect(expected.map((tokens) => tokens.length)).toEqual([30, 12]);
    expect([first.tokens, second.tokens]).toEqual(expected);
  });

  test("drafts are looked up in the reply's own sequence only: each history the natives are handed is what its sequence holds", async () => {
    histories.length = 0;
    const scheduler = new Scheduler(context, sequences, { promptChunk: 16, speculate: "lookup" });
    const turns = [
      reply(scheduler, sequences[0]!, model.tokenize(LONG.text), 40, LONG.sampling),
      reply(scheduler, sequences[1]!, model.tokenize(OTHER.text), 40, OTHER.sampling),
    ];
    await Promise.all(turns.map(({ done }) => done));
    expect(histories.length).toBeGreaterThan(0);
    for (const { history, held } of histories) expect(history).toEqual(held);
  });

  test("bad arguments throw an error at the call, not in the decode", async () => {
    const sampler = new Sampler(context, model, samplingOf({ temperature: 0 }));
    const disposed = new Sampler(context, model, samplingOf({ temperature: 0 }));
    disposed.dispose();
    const id = sequenceIdOf(sequences[0]!);
    try {
      const steps = (ids: unknown, positions: unknown, tokens: unknown, samplers: unknown, limits: unknown = [4], count: unknown = 4, ...drafts: unknown[]) =>
        addon.decodeSteps(ids, positions, tokens, samplers, limits, count, ...drafts);
      expect(() => steps([id], [0], [1], [sampler.native], [4], "4")).toThrow(TypeError);
      expect(() => steps(id, 0, 1, sampler.native, 4)).toThrow(TypeError);
      expect(() => steps([id], [0], ["1"], [sampler.native])).toThrow(TypeError);
      expect(() => steps([], [], [], [], [])).toThrow(/one to the context's sequence count/);
      expect(() => steps([id, id + 1], [0], [1, 1], [sampler.native, sampler.native], [4, 4])).toThrow(/one to the context's sequence count/);
      expect(() => steps([id], [0], [1], [sampler.native], [4, 4])).toThrow(/one to the context's sequence count/);
      expect(() => steps([0, 1, 2], [0, 0, 0], [1, 1, 1], [sampler.native, sampler.native, sampler.native], [4, 4, 4])).toThrow(
        /one to the context's sequence count/,
      );
      expect(() => steps([id], [0], [1], [{}])).toThrow(/not an AddonSampler/);
      expect(() => steps([id], [0], [1], [disposed.native])).toThrow(/a sampler is disposed/);
      expect(() => steps([id], [0], [1], [sampler.native], [4], 0)).toThrow(/at least 1/);
      expect(() => steps([id], [0], [1], [sampler.native], [0])).toThrow(TypeError);
      expect(() => steps([id], [10_000], [1], [sampler.native])).toThrow(/outside the context/);
      expect(() => steps([id], [0], [1], [sampler.native], [10_000])).toThrow(/outside the context/);
      expect(() => steps([id, id], [0, 0], [1, 1], [sampler.native, sampler.native], [4, 4])).toThrow(/repeated/);
      // Numbers that are not whole must not become sequence 0, position 0, token 0 or a limit.
      for (const bad of [NaN, 0.5, Infinity, -1, 2 ** 31]) {
        expect(() => steps([bad], [0], [1], [sampler.native])).toThrow(TypeError);
        expect(() => steps([id], [bad], [1], [sampler.native])).toThrow(TypeError);
        expect(() => steps([id], [0], [bad], [sampler.native])).toThrow(TypeError);
        expect(() => steps([id], [0], [1], [sampler.native], [bad])).toThrow(TypeError);
        expect(() => steps([id], [0], [1], [sampler.native], [4], 4, [bad], [new Uint32Array(0)])).toThrow(TypeError);
      }
      expect(() => steps([id], [0], [1], [sampler.native], [4], NaN)).toThrow(RangeError);
      expect(() => steps([id], [0], [1], [sampler.native], [4], 2.5)).toThrow(RangeError);
      // Positions are checked in 64 bits: this sum overflows 32.
      expect(() => steps([id], [2 ** 31 - 2], [1], [sampler.native])).toThrow(/outside the context/);
      expect(() => steps([id], [0], [model.fileInfo.metadata.tokenizer.ggml.tokens.length], [sampler.native])).toThrow(/vocabulary/);
      // Drafts: a length and a history (a Uint32Array of tokens) for each sequence, within the batch.
      expect(() => steps([id], [0], [1], [sampler.native], [4], 4, [2])).toThrow(TypeError);
      expect(() => steps([id], [0], [1], [sampler.native], [4], 4, [2], [[1, 2]])).toThrow(TypeError);
      expect(() => steps([id], [0], [1], [sampler.native], [4], 4, [2], [new Int32Array(2)])).toThrow(TypeError);
      expect(() => steps([id], [0], [1], [sampler.native], [4], 4, [2, 2], [new Uint32Array(2)])).toThrow(/one to the context's sequence count/);
      expect(() => steps([id], [0], [1], [sampler.native], [4], 4, [context.batchSize], [new Uint32Array(2)])).toThrow(/exceed the context's batch/);
      // Proposals (a draft model's): a Uint32Array for each sequence, beside drafts, within its draft length and the vocabulary.
      const history = [new Uint32Array(2)];
      expect(() => steps([id], [0], [1], [sampler.native], [4], 4, undefined, undefined, [Uint32Array.of(1)])).toThrow(TypeError);
      expect(() => steps([id], [0], [1], [sampler.native], [4], 4, [2], history, [[1]])).toThrow(TypeError);
      expect(() => steps([id], [0], [1], [sampler.native], [4], 4, [2], history, [])).toThrow(/one to the context's sequence count/);
      expect(() => steps([id], [0], [1], [sampler.native], [4], 4, [2], history, [Uint32Array.of(1, 2, 3)])).toThrow(/longer than its draft length/);
      const outside = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
      expect(() => steps([id], [0], [1], [sampler.native], [4], 4, [2], history, [Uint32Array.of(outside)])).toThrow(/vocabulary/);
      // Objects of another native class are refused, as `this` and as a sampler.
      expect(() => steps([id], [0], [1], [addon])).toThrow(/not an AddonSampler/);
      expect(() => addon.decodeSteps.call(sampler.native, [id], [0], [1], [sampler.native], [4], 4)).toThrow(/not an AddonContext/);
    } finally {
      sampler.dispose();
    }
  });

  /**
   * A child process, the only one of its addon's users (the addon's log goes to one Llama a
   * process), that runs `call` on a fresh context of the demo model or `preset` (`context`,
   * `model`, `sequence`, an endless `sampler`); its exit code and output, the addon's log included.
   */
  async function child(call: string, preset: "demo" | "bench-small" = "demo"): Promise<{ code: number | null; out: string }> {
    const script = `
      import { getLlama } from "node-llama-cpp";
      import { useLocalNatives } from "${import.meta.dir}/../../src/natives/local";
      import { abortSteps, decodeBatch, decodeSteps } from "${import.meta.dir}/../../src/natives/addon";
      import { endlessSampler } from "${import.meta.dir}/../support/natives";
      await useLocalNatives();
      const model = await (await getLlama({ gpu: false, build: "never" })).loadModel({ modelPath: ${JSON.stringify(await presetModel(preset))} });
      const context = await model.createContext({ contextSize: 4096, sequences: 1, threads: ${preset === "demo" ? 1 : 2} });
      const sampler = endlessSampler(context, model);
      const sequence = context.getSequence();
      ${call}
    `;
    const proc = Bun.spawn([Bun.which("bun")!, "-e", script], { cwd: import.meta.dir, stdout: "pipe", stderr: "pipe" });
    let exited = false;
    void proc.exited.then(() => (exited = true));
    try {
      await until(() => exited, "the process to exit on its own", 30_000);
    } finally {
      proc.kill("SIGKILL");
    }
    return { code: proc.exitCode, out: (await new Response(proc.stdout).text()) + (await new Response(proc.stderr).text()) };
  }

  test("an idle process exits on its own: the way back to the JS thread holds it only while a call is out", async () => {
    const { code, out } = await child(`
      const [{ tokens }] = await decodeSteps(context, [{ sequence, token: model.tokenize("hello")[0], sampler, limit: 3 }], () => 3);
      console.log("sampled", tokens.length);
    `);
    expect(out).toMatch(/^sampled 3$/m);
    expect(code).toBe(0);
  }, 40_000);

  test("a process exiting while a call runs (a second signal's exit, say) ends cleanly: the call is aborted and waited for", async () => {
    const { code, out } = await child(`
      const running = decodeSteps(context, [{ sequence, token: model.tokenize("hello")[0], sampler, limit: 4000 }], () => 4000);
      console.log("running");
      setTimeout(() => process.exit(7), 5);
      await running;
      console.log("the call ended before the exit");
    `);
    expect(out).toMatch(/^running$/m);
    expect(out).not.toContain("the call ended");
    expect(code).toBe(7);
  }, 40_000);

  test("aborted steps log nothing, and a batch llama.cpp refuses afterwards is logged", async () => {
    // bench-small's steps are long: aborts 15 ms into a call land inside a decode.
    const { code, out } = await child(
      `
      const [first] = await decodeBatch(context, [{ sequence, tokens: model.tokenize("the sea is calm"), sampler }]);
      let token = first.token;
      let cut = 0;
      for (let call = 0; call < 5; call++) {
        const running = decodeSteps(context, [{ sequence, token, sampler, limit: 1000 }], () => 1000);
        setTimeout(() => abortSteps(context), 15);
        const [{ tokens }] = await running;
        token = tokens.at(-1) ?? token;
        if (tokens.length < 1000) cut++;
      }
      console.log("cut", cut);
      const addon = context._ctx;
      addon.initBatch(1);
      addon.addToBatch(0, sequence.nextTokenIndex, Uint32Array.of(model.fileInfo.metadata.tokenizer.ggml.tokens.length + 1), new Uint32Array(0));
      await addon.decodeBatch().catch(() => console.log("refused"));
      await context.dispose();
    `,
      "bench-small",
    );
    expect(out).toMatch(/^cut 5$/m);
    expect(out).toMatch(/^refused$/m);
    expect(out.split("\n").filter((line) => /failed to decode|removing memory module|compute/.test(line))).toEqual([expect.stringContaining("ret = -1")]);
    expect(code).toBe(0);
  }, 40_000);
});
