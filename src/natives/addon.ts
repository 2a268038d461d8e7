/**
 * One llama.cpp batch, decoded and sampled through node-llama-cpp's addon directly: the narrow
 * entry point below its public API that scheduler.ts drives.
 *
 * Why not `sequence.evaluate`: between two decodes it runs a chain of locks, promises, its batch
 * dispatcher (a `setImmediate` away) and an async generator per sequence, all on the main thread
 * while the decode's threads wait for the next token: a loop of these same calls decoded one
 * stream faster than it, and as fast as llama-server.
 *
 * node-llama-cpp's sequences stay the owners of their state: each batch takes the context's lock
 * (the very lock their own evaluations, erasures and state files take), and afterwards sets what
 * their evaluation would have set (next position, tokens held, checkpoints for models that need
 * them). These are internals of NODE_LLAMA_CPP_VERSION (version.ts), checked at load; `checkInternals`
 * also refuses another shape, and test/llm/scheduler.test.ts exercises each of them.
 */
import { withLock } from "lifecycle-utils";
import type { LlamaContext, LlamaContextOptions, LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";

interface AddonContext {
  initBatch(size: number): void;
  addToBatch(sequenceId: number, firstTokenSequenceIndex: number, tokens: Uint32Array, logitIndexes: Uint32Array): Uint32Array;
  decodeBatch(): Promise<void>;
  sampleToken(batchLogitIndex: number, sampler: AddonSampler): Promise<Token | -1>;
  removeTokenCellsFromSequence(sequenceId: number, start: number, end: number): boolean;
  /** Parley's compiled natives add these (src/natives/decode-steps.cpp, token-logprobs.cpp, pooled-embeddings.cpp); the npm prebuilt lacks them. */
  decodeSteps?(
    sequenceIds: number[],
    positions: number[],
    tokens: Token[],
    samplers: AddonSampler[],
    limits: number[],
    steps: number,
    draftLengths?: number[],
    histories?: Uint32Array[],
    proposals?: Uint32Array[],
  ): Promise<Int32Array>;
  abortSteps?(): void;
  tokenLogprobs?(batchLogitIndex: number, token: Token, top: number): Float64Array;
  tokenBytes?(token: Token): Uint8Array;
  /** Parley's (src/natives/infill-sampler.cpp): llama.cpp's infill sampler into the sampler's chain, before its draw. */
  addInfillSampler?(sampler: AddonSampler): void;
  pooledEmbeddings?(sequenceIds: number[]): Float32Array;
  tokenizeInput?(text: string, addSpecial: boolean, parseSpecial: boolean): Uint32Array;
  /** Parley's (src/natives/sequence-state.cpp): a sequence's state copied in memory, and back. */
  sequenceState?(sequenceId: number, tokens: Uint32Array): Promise<Uint8Array>;
  restoreSequenceState?(sequenceId: number, cells: Uint8Array): Promise<void>;
  /** Parley's (src/natives/vision.cpp): a projector for images in prompts, an image's chunks, and one evaluated into a sequence. */
  loadProjector?(path: string, threads: number): Promise<string>;
  unloadProjector?(): void;
  imageLayout?(image: Uint8Array, key: string): Promise<Int32Array>;
  evalImage?(sequenceId: number, position: number, image: Uint8Array, key: string, chunk: number, batch: number): Promise<number>;
  /** The addon's own: the pooled output of sequence 0 after a decode. */
  getEmbedding(inputTokensLength: number, maxVectorSize?: number): Float64Array;
}

interface AddonSampler {
  applyConfig(config: object): void;
  dispose(): void;
}

interface AddonSamplerClass {
  new (model: unknown): AddonSampler;
  acceptGrammarEvaluationStateToken(state: unknown, token: Token): void;
}

interface ContextInternals {
  _ctx: AddonContext;
  /** Disposal of the native context waits while a handle is held; creating one throws once it began. */
  _backendContextDisposeGuard: { createPreventDisposalHandle(): { dispose(): void } };
  _llama: { _bindings: { AddonSampler: AddonSamplerClass } };
}

export interface SequenceInternals {
  _sequenceId: number;
  _nextTokenIndex: number;
  _contextTokens: Token[];
  _takeIntervalCheckpointIfNeededAfterBatch(sequenceStateLength: number): Promise<void> | void;
}

export const internals = <T>(value: unknown) => value as T;

/** The sequence's id in the context: llama.cpp batches sequences in one piece only in ascending ids. */
export const sequenceIdOf = (sequence: LlamaContextSequence) => internals<SequenceInternals>(sequence)._sequenceId;

/**
 * Throws, naming what is missing, unless node-llama-cpp has the internals used here: a different
 * version must fail at load, not corrupt a sequence mid-reply.
 */
export function checkInternals(context: LlamaContext, model: LlamaModel, sequence: LlamaContextSequence): void {
  const ctx = internals<Partial<ContextInternals>>(context);
  const seq = internals<Partial<SequenceInternals>>(sequence);
  const missing = [
    ...(["initBatch", "addToBatch", "decodeBatch", "sampleToken", "removeTokenCellsFromSequence"] as const)
      .filter((name) => typeof ctx._ctx?.[name] !== "function")
      .map((name) => `context._ctx.${name}`),
    ...(typeof ctx._llama?._bindings?.AddonSampler === "function" ? [] : ["context._llama._bindings.AddonSampler"]),
    ...(typeof ctx._llama?._bindings?.AddonSampler?.acceptGrammarEvaluationStateToken === "function" ? [] : ["AddonSampler.acceptGrammarEvaluationStateToken"]),
    ...(typeof ctx._backendContextDisposeGuard?.createPreventDisposalHandle === "function" ? [] : ["context._backendContextDisposeGuard"]),
    ...(internals<{ _model?: unknown }>(model)._model === undefined ? ["model._model"] : []),
    ...(typeof seq._sequenceId === "number" ? [] : ["sequence._sequenceId"]),
    ...(typeof seq._nextTokenIndex === "number" ? [] : ["sequence._nextTokenIndex"]),
    ...(Array.isArray(seq._contextTokens) ? [] : ["sequence._contextTokens"]),
    ...(typeof seq._takeIntervalCheckpointIfNeededAfterBatch === "function" ? [] : ["sequence._takeIntervalCheckpointIfNeededAfterBatch"]),
  ];
  if (missing.length > 0) {
    throw new Error(`this node-llama-cpp lacks internals Parley's scheduler uses (${missing.join(", ")}): install the version package.json pins`);
  }
}

/** Every choice of a sampler: the engine's sampling policy makes them (src/llm/types.ts). */
export interface SamplerConfig {
  temperature: number;
  topK: number;
  topP: number;
  minP: number;
  seed: number;
  /** Over the tokens the sampler has sampled, the last `window` of them. */
  penalties?: { repeat: number; presence: number; frequency: number; window: number };
  logitBias?: ReadonlyMap<number, number>;
  /** A `LlamaGrammarEvaluationState`: the sampler keeps the reply within its grammar. */
  grammar?: object;
  /** A grammar state that holds once `armed` (a tool call's opener written), from the next token on. */
  lazyGrammar?: { readonly state: object; armed: boolean };
  /** llama.cpp's infill sampler before the draw (natives that have it: `hasInfillSampler`). */
  infillSampler?: true;
}

/**
 * A reply's sampler, configured as node-llama-cpp's `sequence.evaluate` configures one. Each token
 * it samples counts towards its penalties (the addon accepts it into the sampler).
 */
export class Sampler {
  readonly native: AddonSampler;
  private readonly natives: AddonSamplerClass;
  private readonly ctx: AddonContext;
  /** The last tokens sampled, as many as the penalties count: given again when the configuration changes. */
  private readonly recent: Token[] = [];
  private constrained = false;

  constructor(
    context: LlamaContext,
    model: LlamaModel,
    private readonly config: SamplerConfig,
  ) {
    this.ctx = internals<ContextInternals>(context)._ctx;
    this.natives = internals<ContextInternals>(context)._llama._bindings.AddonSampler;
    this.native = new this.natives(internals<{ _model: unknown }>(model)._model);
    this.configure(config.grammar);
  }

  /** Every field again (the addon drops what a configuration leaves out), and the infill sampler, which a new draw leaves out. */
  private configure(grammar: object | undefined): void {
    this.native.applyConfig(this.nativeConfig(grammar));
    if (!this.config.infillSampler) return;
    if (!this.ctx.addInfillSampler) throw new Error("these natives have no infill sampler: Parley's compiled natives do");
    this.ctx.addInfillSampler(this.native);
  }

  /** The grammar that holds the reply now: its own, or its lazy one once armed. */
  private get grammar(): object | undefined {
    return this.constrained ? this.config.lazyGrammar!.state : this.config.grammar;
  }

  /** Whether the configuration stays as it is: none waits for its lazy grammar to be armed. */
  get settled(): boolean {
    return this.config.lazyGrammar === undefined || this.constrained;
  }

  /** Notes a token the sampler sampled (the scheduler gives each one to its reply). */
  sampled(token: Token): void {
    const window = this.config.penalties?.window ?? 0;
    if (window === 0) return;
    this.recent.push(token);
    if (this.recent.length > window) this.recent.shift();
  }

  /**
   * Notes tokens the reply took without sampling them (a thought's close at its budget): the
   * grammar moves past them and the penalties count them, as if the sampler had sampled them.
   */
  forced(tokens: readonly Token[]): void {
    const { grammar } = this;
    for (const token of tokens) {
      if (grammar) this.natives.acceptGrammarEvaluationStateToken(grammarStateOf(grammar), token);
      this.sampled(token);
    }
    // The addon's penalties hold only what it sampled: the configuration again gives them the rest.
    if ((this.config.penalties?.window ?? 0) > 0) this.configure(grammar);
  }

  /** Before the next token is sampled: a lazy grammar armed since holds from now on. */
  prepare(): void {
    const lazy = this.config.lazyGrammar;
    if (!lazy?.armed || this.constrained) return;
    this.constrained = true;
    // The penalties' history given again is the one the addon holds, so it carries on.
    this.configure(lazy.state);
  }

  private nativeConfig(grammar: object | undefined) {
    const { temperature, topK, topP, minP, seed, penalties, logitBias } = this.config;
    return {
      temperature,
      minP,
      topK,
      topP,
      seed,
      ...(penalties && {
        repeatPenaltyTokens: Uint32Array.from(this.recent),
        repeatPenalty: penalties.repeat,
        repeatPenaltyMaxTokens: penalties.window,
        repeatPenaltyPresencePenalty: penalties.presence,
        repeatPenaltyFrequencyPenalty: penalties.frequency,
      }),
      ...(logitBias && { tokenBiasKeys: Uint32Array.from(logitBias.keys()), tokenBiasValues: Float32Array.from(logitBias.values()) }),
      ...(grammar && { grammarEvaluationState: grammarStateOf(grammar) }),
    };
  }

  dispose(): void {
    this.native.dispose();
  }
}

/** The native state of a `LlamaGrammarEvaluationState`: without it the grammar would silently not apply. */
function grammarStateOf(grammar: object): unknown {
  const state = internals<{ _state?: unknown }>(grammar)._state;
  if (state === undefined) throw new Error("this node-llama-cpp's grammar states lack the _state Parley's sampler uses: install the version package.json pins");
  return state;
}

export interface BatchEntry {
  sequence: LlamaContextSequence;
  tokens: readonly Token[];
  /** Samples the token after the last one: a reply's next token. */
  sampler?: Sampler;
  /** With the sampled token, its log-probability and this many most likely tokens' (see `TokenLogprobs`). */
  logprobs?: number;
}

/**
 * A sampled token's log-probability under the model's own distribution (the raw logits'
 * log-softmax, before any sampler), and the most likely tokens' in order.
 */
export interface TokenLogprobs {
  logprob: number;
  top: { token: Token; logprob: number }[];
}

/** A token sampled for an entry, with its log-probabilities when the entry asked for them. */
export interface Sampled {
  token: Token;
  logprobs?: TokenLogprobs;
}

/** Whether the natives can tell a sampled token's log-probabilities (Parley's compiled natives can). */
export const hasInfillSampler = (context: LlamaContext): boolean => internals<ContextInternals>(context)._ctx.addInfillSampler !== undefined;

export function hasLogprobs(context: LlamaContext): boolean {
  const ctx = internals<ContextInternals>(context)._ctx;
  return ctx.tokenLogprobs !== undefined && ctx.tokenBytes !== undefined;
}

/** The bytes the model spells `token` with: part of a character, for a token that is one. */
export function tokenBytes(context: LlamaContext, token: Token): Uint8Array {
  const ctx = internals<ContextInternals>(context)._ctx;
  if (!ctx.tokenBytes) throw new Error("these natives cannot spell tokens' bytes: Parley's compiled natives can");
  return ctx.tokenBytes(token);
}

/**
 * A context whose decodes pool each sequence into the output the model declares (`<arch>.pooling_type`):
 * an embedding, or a ranking model's scores. node-llama-cpp makes its embedding contexts so.
 */
export function createPoolingContext(model: LlamaModel, options: LlamaContextOptions): Promise<LlamaContext> {
  return model.createContext({ ...options, _embeddings: true } as LlamaContextOptions);
}

/**
 * `text`'s tokens with the special tokens the model's tokenizer adds to an input (bos, eos, BERT's
 * [CLS] and [SEP]) and special tokens' texts parsed, as llama-server tokenizes an input to embed.
 * The prebuilt natives cannot add them: there, the bos and eos the model asks for.
 */
export function inputTokens(context: LlamaContext, model: LlamaModel, text: string): Token[] {
  const ctx = internals<ContextInternals>(context)._ctx;
  if (ctx.tokenizeInput) return Array.from(ctx.tokenizeInput(text, true, true)) as Token[];
  const { bos, eos, shouldPrependBosToken, shouldAppendEosToken } = model.tokens;
  return [...(shouldPrependBosToken && bos !== null ? [bos] : []), ...model.tokenize(text, true), ...(shouldAppendEosToken && eos !== null ? [eos] : [])];
}

/** Whether one decode can pool several sequences (Parley's compiled natives can; the prebuilt pools sequence 0 only). */
export function poolsSequences(context: LlamaContext): boolean {
  return internals<ContextInternals>(context)._ctx.pooledEmbeddings !== undefined;
}

/**
 * Each input's pooled output (its embedding, or a ranking model's scores), decoded together in one
 * batch in a context made for embeddings: input i in sequence i, each sequence emptied after. Without
 * `poolsSequences`, one input at a time.
 */
export async function decodePooled(context: LlamaContext, inputs: readonly (readonly Token[])[]): Promise<Float32Array[]> {
  return await locked(context, async (ctx) => {
    if (!ctx.pooledEmbeddings && inputs.length > 1) throw new Error("these natives pool one sequence a decode");
    ctx.initBatch(inputs.reduce((sum, tokens) => sum + tokens.length, 0));
    // Every token an output, as llama.cpp makes them anyway when it pools (and logs that it did).
    for (const [id, tokens] of inputs.entries()) ctx.addToBatch(id, 0, Uint32Array.from(tokens), Uint32Array.from(tokens.keys()));
    try {
      await ctx.decodeBatch();
      if (!ctx.pooledEmbeddings) return [Float32Array.from(ctx.getEmbedding(inputs[0]!.length))];
      const pooled = ctx.pooledEmbeddings(inputs.map((_, id) => id));
      const width = pooled.length / inputs.length;
      return inputs.map((_, id) => pooled.slice(id * width, (id + 1) * width));
    } finally {
      for (let id = 0; id < inputs.length; id++) ctx.removeTokenCellsFromSequence(id, 0, -1);
    }
  });
}

/** Whether a token a sequence holds is an image's position (see vision.ts's `evalImage`). */
export const isImagePosition = (token: Token) => token < 0;

/** The tokens after the last image: what guesses at a reply's next tokens may be drawn from (an image's positions are no tokens to guess). */
export function afterImages(tokens: readonly Token[]): readonly Token[] {
  const last = tokens.findLastIndex(isImagePosition);
  return last < 0 ? tokens : tokens.slice(last + 1);
}

/** Whether each sequence takes checkpoints (recurrent, hybrid, sliding-window models): fixed for its life, costly to ask. */
const checkpointing = new WeakMap<LlamaContextSequence, boolean>();

/**
 * Decodes the entries in one batch, in the order given (scheduler.ts orders them), and samples
 * for those with a sampler: their tokens, in order, with undefined for the others.
 */
export async function decodeBatch(context: LlamaContext, entries: readonly BatchEntry[]): Promise<(Sampled | undefined)[]> {
  return await locked(context, (ctx) => decodeLocked(context, ctx, entries));
}

/**
 * `use` under the context's lock, the lock node-llama-cpp's own batches, erasures and state files
 * take. Disposing the context waits for it, as for node-llama-cpp's own batches; once disposal has
 * begun it throws, and the turns end.
 */
export async function locked<T>(context: LlamaContext, use: (ctx: AddonContext) => Promise<T> | T): Promise<T> {
  return await withLock([context, "context"], () => undisposed(context, use));
}

/**
 * `use` with the context kept from disposal, without its lock: for native work that touches no
 * sequence and no decode (laying a picture out), which then goes on beside the batches.
 */
export async function undisposed<T>(context: LlamaContext, use: (ctx: AddonContext) => Promise<T> | T): Promise<T> {
  const { _ctx: ctx, _backendContextDisposeGuard: disposeGuard } = internals<ContextInternals>(context);
  const disposal = disposeGuard.createPreventDisposalHandle();
  try {
    return await use(ctx);
  } finally {
    disposal.dispose();
  }
}

/**
 * Whether `decodeSteps` can run the sequence: the addon has it, and the sequence can take back
 * what it decoded past a reply's end (a recurrent or hybrid model's state cannot).
 */
export function canDecodeSteps(context: LlamaContext, sequence: LlamaContextSequence): boolean {
  return internals<ContextInternals>(context)._ctx.decodeSteps !== undefined && !needsCheckpoints(sequence);
}

/** A reply for `decodeSteps`: its sequence, its last token (not yet decoded) and its sampler. */
export interface StepsEntry {
  sequence: LlamaContextSequence;
  token: Token;
  sampler: Sampler;
  /** Tokens it may sample at most in the call: the call ends once one entry has. */
  limit: number;
  /**
   * Tokens guessed from its own sequence (src/natives/lookup-draft.h) that each step verifies at
   * most; with 0, each step's guess is still checked (`Stepped.tried`). Without, no guesses.
   */
  draft?: number;
  /** A draft model's guesses, at most `draft` of them, that the first step verifies in place of its own. */
  proposal?: readonly Token[];
}

/** What `decodeSteps` gave an entry. */
export interface Stepped {
  tokens: Token[];
  /** Of the tokens its steps drafted, how many, and how many the sampler sampled too. */
  drafted: number;
  accepted: number;
  /** Its guesses tried (drafted tokens verified, and each step's guess at its next token where it drafted none), and those right. */
  tried: number;
  right: number;
}

/**
 * The next tokens of each of these replies, decoded together a batch a step and sampled on the
 * decode thread without coming back here between steps (src/natives/decode-steps.cpp). The first
 * step decodes each reply's `token`, the next ones the tokens sampled, with each entry's draft
 * after its token: a step then gives an entry every drafted token its sampler sampled too, and the
 * one it sampled after them. As many steps as `steps`, asked once the context's lock is taken, says
 * (none for 0: an abort before the call began would not reach it); fewer after a step that sampled
 * an end of generation or brought an entry to its limit, or after `abortSteps`. The sequences hold
 * every token decoded: `dropLast` takes back those past where a reply ended.
 */
export async function decodeSteps(context: LlamaContext, entries: readonly StepsEntry[], steps: () => number): Promise<Stepped[]> {
  return await locked(context, async (ctx) => {
    const wanted = steps();
    if (wanted < 1) return entries.map(() => ({ tokens: [], drafted: 0, accepted: 0, tried: 0, right: 0 }));
    const sequences = entries.map(({ sequence }) => internals<SequenceInternals>(sequence));
    const positions = sequences.map((seq) => seq._nextTokenIndex);
    // One position stays free at the end, as node-llama-cpp keeps it.
    const limits = entries.map(({ limit }, i) => Math.min(limit, context.contextSize - 1 - positions[i]!));
    if (limits.some((limit) => limit < 1)) throw new Error("the sequence's context is full");
    // Only a guessing sequence's tokens are copied.
    const guessing = entries.some(({ draft }) => draft !== undefined);
    const draftLengths = guessing ? entries.map(({ draft }) => draft ?? 0) : undefined;
    const histories = guessing
      ? sequences.map((seq, i) => (entries[i]!.draft === undefined ? new Uint32Array(0) : Uint32Array.from(afterImages(seq._contextTokens))))
      : undefined;
    const proposals = entries.some(({ proposal }) => proposal !== undefined) ? entries.map(({ proposal = [] }) => Uint32Array.from(proposal)) : undefined;
    const sampled = await repairing(ctx, entries, () =>
      ctx.decodeSteps!(
        sequences.map((seq) => seq._sequenceId),
        positions,
        entries.map(({ token }) => token),
        entries.map(({ sampler }) => sampler.native),
        limits,
        wanted,
        draftLengths,
        histories,
        proposals,
      ),
    );
    const n = entries.length;
    let at = 5 * n;
    const stepped = entries.map((_, i) => {
      const tokens = Array.from(sampled.subarray(at, (at += sampled[i]!)) as Int32Array, (token) => token as Token);
      return { tokens, drafted: sampled[n + i]!, accepted: sampled[2 * n + i]!, tried: sampled[3 * n + i]!, right: sampled[4 * n + i]! };
    });
    recordDecoded(
      entries.flatMap(({ sequence, token }, i) => (stepped[i]!.tokens.length > 0 ? [{ sequence, tokens: [token, ...stepped[i]!.tokens.slice(0, -1)] }] : [])),
    );
    return stepped;
  });
}

/** Takes the last `count` tokens out of the sequence (its KV cells and what node-llama-cpp records). */
export async function dropLast(context: LlamaContext, sequence: LlamaContextSequence, count: number): Promise<void> {
  if (count === 0) return;
  await locked(context, (ctx) => {
    const seq = internals<SequenceInternals>(sequence);
    seq._nextTokenIndex -= count;
    seq._contextTokens.splice(-count);
    ctx.removeTokenCellsFromSequence(seq._sequenceId, seq._nextTokenIndex, -1);
  });
}

/** Whether the natives copy a sequence's state in memory (Parley's compiled natives do). */
export function copiesStates(context: LlamaContext): boolean {
  return internals<ContextInternals>(context)._ctx.sequenceState !== undefined;
}

/**
 * A sequence's state copied in memory (src/natives/sequence-state.cpp): llama.cpp's state file's
 * header (12 bytes: magic, version, token count), the tokens, then its cells as llama.cpp copies
 * them in memory, which start with 8 bytes of their own header.
 */
export interface SequenceState {
  readonly bytes: Uint8Array;
  readonly tokens: readonly Token[];
}

const FILE_HEADER_BYTES = 12;
const CELLS_HEADER_BYTES = 8;
const cellsAt = (state: SequenceState) => FILE_HEADER_BYTES + 4 * state.tokens.length;

/** The sequence's state (its cells and the tokens it holds), copied in memory. */
export async function copyState(sequence: LlamaContextSequence): Promise<SequenceState> {
  return await locked(sequence.context, async (ctx) => {
    if (!ctx.sequenceState) throw new Error("these natives cannot copy a sequence's state: Parley's compiled natives can");
    const seq = internals<SequenceInternals>(sequence);
    const tokens = [...seq._contextTokens];
    return { bytes: await ctx.sequenceState(seq._sequenceId, Uint32Array.from(tokens)), tokens };
  });
}

/**
 * Loads a `copyState` copy into the sequence: it then holds the copy's tokens, or nothing where
 * llama.cpp refused the bytes (it throws then).
 */
export async function restoreState(sequence: LlamaContextSequence, state: SequenceState): Promise<void> {
  await locked(sequence.context, async (ctx) => {
    if (!ctx.restoreSequenceState) throw new Error("these natives cannot restore a sequence's state: Parley's compiled natives can");
    const seq = internals<SequenceInternals>(sequence);
    seq._contextTokens = [];
    seq._nextTokenIndex = 0;
    await ctx.restoreSequenceState(seq._sequenceId, state.bytes.subarray(cellsAt(state)));
    seq._contextTokens = [...state.tokens];
    seq._nextTokenIndex = state.tokens.length;
  });
}

/** The state as `sequence.saveStateToFile` writes it, in two pieces to write one after the other. */
export function stateFileParts(state: SequenceState): [Uint8Array, Uint8Array] {
  const at = cellsAt(state);
  return [state.bytes.subarray(0, at), state.bytes.subarray(at + CELLS_HEADER_BYTES)];
}

/** Ends a `decodeSteps` in flight within its current step, which then counts for nothing. */
export function abortSteps(context: LlamaContext): void {
  internals<ContextInternals>(context)._ctx.abortSteps?.();
}

async function decodeLocked(context: LlamaContext, ctx: AddonContext, entries: readonly BatchEntry[]): Promise<(Sampled | undefined)[]> {
  // One position stays free at the end, as node-llama-cpp keeps it.
  if (entries.some(({ sequence, tokens }) => internals<SequenceInternals>(sequence)._nextTokenIndex + tokens.length >= context.contextSize)) {
    throw new Error("the sequence's context is full");
  }
  ctx.initBatch(entries.reduce((sum, entry) => sum + entry.tokens.length, 0));
  const logitIndexes = entries.map(({ sequence, tokens, sampler }) => {
    const seq = internals<SequenceInternals>(sequence);
    const outputs = sampler ? Uint32Array.of(tokens.length - 1) : new Uint32Array(0);
    return ctx.addToBatch(seq._sequenceId, seq._nextTokenIndex, Uint32Array.from(tokens), outputs)[0];
  });
  await repairing(ctx, entries, () => ctx.decodeBatch());
  recordDecoded(entries);
  const sampled = await Promise.all(entries.map(({ sampler }, i) => (sampler ? ctx.sampleToken(logitIndexes[i]!, sampler.native) : undefined)));
  for (const { sequence } of entries) {
    if (!needsCheckpoints(sequence)) continue;
    const seq = internals<SequenceInternals>(sequence);
    await seq._takeIntervalCheckpointIfNeededAfterBatch(seq._nextTokenIndex + 1);
  }
  if (sampled.includes(-1)) throw new Error("llama.cpp failed to sample a token");
  // Before the next decode, which overwrites the logits.
  return entries.map(({ logprobs }, i) => {
    const token = sampled[i] as Token | undefined;
    if (token === undefined) return undefined;
    return logprobs === undefined ? { token } : { token, logprobs: logprobsOf(ctx, logitIndexes[i]!, token, logprobs) };
  });
}

function logprobsOf(ctx: AddonContext, logitIndex: number, token: Token, top: number): TokenLogprobs {
  if (!ctx.tokenLogprobs) throw new Error("these natives cannot tell log-probabilities: Parley's compiled natives can");
  const values = ctx.tokenLogprobs(logitIndex, token, top);
  return {
    logprob: values[0]!,
    top: Array.from({ length: (values.length - 1) / 2 }, (_, i) => ({ token: values[1 + 2 * i]! as Token, logprob: values[2 + 2 * i]! })),
  };
}

/**
 * `decode`, after which a failure leaves each sequence holding exactly what is recorded of it: a
 * failed decode may have kept some of its cells (llama.cpp takes back only the piece of the batch
 * it was computing), and a sequence whose cells and records disagree fails every batch after.
 */
async function repairing<T>(ctx: AddonContext, entries: readonly { sequence: LlamaContextSequence }[], decode: () => Promise<T>): Promise<T> {
  try {
    return await decode();
  } catch (error) {
    for (const { sequence } of entries) {
      const seq = internals<SequenceInternals>(sequence);
      ctx.removeTokenCellsFromSequence(seq._sequenceId, seq._nextTokenIndex, -1);
    }
    throw error;
  }
}

/** What the sequences' own evaluation sets once a batch is decoded. */
function recordDecoded(entries: readonly { sequence: LlamaContextSequence; tokens: readonly Token[] }[]): void {
  for (const { sequence, tokens } of entries) {
    const seq = internals<SequenceInternals>(sequence);
    seq._nextTokenIndex += tokens.length;
    for (const token of tokens) seq._contextTokens.push(token);
  }
}

function needsCheckpoints(sequence: LlamaContextSequence): boolean {
  let needed = checkpointing.get(sequence);
  if (needed === undefined) checkpointing.set(sequence, (needed = sequence.needsCheckpoints));
  return needed;
}
