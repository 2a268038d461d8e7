/**
 * The owner of a context: one loop performs every operation on its sequences, in order, as
 * llama-server's `update_slots` does with its task queue. A sequence's state saved or loaded, its
 * unshared tokens erased, prompt chunks, decode steps, tokens taken back after a reply's end: all
 * of it is work of this loop, so nothing else ever waits for the context's lock, and no batch goes
 * out while a sequence is being readied.
 *
 * Each sequence is a `Slot` with an explicit state:
 *   Idle → Preparing (its turn's prompt fitted off the loop) → Prompt (evaluated a chunk a step)
 *   → Replying (a token a step) → Idle.
 * Readying a slot (Preparing → Prompt) happens in the loop as soon as the turn's prompt is known:
 * the conversation the slot held saved, the turn's own saved state loaded, what the prompt does not
 * reuse erased; the prompt then joins the very next batch.
 *
 * Each step gives every running reply its next token in one llama.cpp batch and evaluates a chunk
 * of each long prompt beside them, so a long prompt never freezes the replies already streaming
 * (continuous batching). A reply's sampled token is handed to its turn synchronously (which turns
 * it into text and checks the stops), and the next batch goes out at once.
 *
 * One kind of work per batch, in this order within a step:
 * 1. Prompts' ends, which give new replies their first token: a request that arrives while others
 *    decode waits only for the batch in flight and its own prompt. With `promptEnds` "shortest"
 *    (the default), ends go one a batch, shortest first, but for ends of a few tokens (see
 *    `SHARED_END_TOKENS`).
 * 2. Running replies' next tokens.
 * 3. Chunks of long prompts, one per prompt and step.
 * Mixing kinds would save nothing: llama.cpp computes a batch whose sequences bring different token
 * counts as one piece of a token per sequence, then the rest. Within a batch the sequences go in
 * ascending id: node-llama-cpp keeps a KV cache per sequence, and llama.cpp computes a batch in one
 * piece only where the ids go up one by one (`split_equal`).
 *
 * With `promptEnds` "together", while nothing replies, prompts wait for the slots
 * still Preparing: turns that arrive together share their prompts' batch instead of the first
 * going alone. A reply never waits for them.
 *
 * Replies with nothing else to do run `STEPS_PER_CALL` steps a native call where the compiled
 * natives allow it (`decodeSteps` in src/natives/addon.ts). Work for the loop arriving meanwhile (a
 * prompt ready, a task) aborts the call within the step in flight.
 */
import type { LlamaContext, LlamaContextSequence, Token } from "node-llama-cpp";
import {
  abortSteps,
  afterImages,
  type BatchEntry,
  canDecodeSteps,
  checkInternals,
  decodeBatch,
  decodeSteps,
  dropLast,
  isImagePosition,
  type Sampled,
  Sampler,
  type Stepped,
  sequenceIdOf,
  type TokenLogprobs,
} from "../natives/addon";
import { evalImage, type ImagePiece } from "../natives/vision";
import { AcceptancePriors, type DraftLength, draftLength } from "./draft-length";
import type { DraftModel } from "./draft-model";
import type { Found, KvStore } from "./kv-store";
import type { Transcript } from "./transcript";
import { BudgetExceeded, type PromptEnds, replyRoom, type Sampling, type Speculate } from "./types";

export enum SlotState {
  /** No turn: the sequence holds what its last turn left. */
  Idle = "idle",
  /** A turn has it; its prompt is being fitted off the loop. */
  Preparing = "preparing",
  /** Its prompt is being evaluated, a chunk a step. */
  Prompt = "prompt",
  /** Its reply is being sampled, a token a step. */
  Replying = "replying",
}

/** A sequence of the context, and what is known of what it holds. */
export class Slot {
  state = SlotState.Idle;
  /** What the sequence holds, when known token for token: set by the turn that ran on it. */
  transcript?: Transcript;
  /** The transcript's state is on disk as it is now, or is never to be saved (a stateless prompt's). */
  saved = false;
  /** The `cacheScope` of the requests whose KV state the sequence holds. */
  scope?: string;
  /** Its id in the context: llama.cpp batches sequences in one piece only in ascending ids. */
  readonly id: number;

  constructor(readonly sequence: LlamaContextSequence) {
    this.id = sequenceIdOf(sequence);
  }
}

/** What a turn's prompt is, given what its slot holds once readied. */
export interface PromptPlan {
  /** The whole prompt the sequence is to hold. */
  tokens: readonly Token[];
  /** The most of what the sequence holds that the prompt may keep. */
  reusable: number;
  /** Token positions [start, end) of turns the prompt dropped: their cells are removed and the rest shifted down first. */
  drop?: { start: number; end: number };
  /** What each image placeholder among `tokens` stands for (images.ts): the projector evaluates its run. */
  images?: ReadonlyMap<Token, ImagePiece>;
}

export type Prompter = (slot: Slot) => PromptPlan;

/** A readied turn's prompt. */
export interface ReadyPrompt {
  tokens: readonly Token[];
  /** Of `tokens`, those the sequence already held. */
  cachedTokens: number;
  /** Reply tokens allowed: the turn's own cap, within the room the context has left after the prompt. */
  maxTokens: number;
}

export interface Turn {
  slot: Slot;
  /** The conversation the turn belongs to; none for a stateless prompt, whose state is never saved. */
  key?: string;
  /** Whose KV state the sequence holds once the turn has run: its user. */
  scope: string;
  /** The prompt, worked out off the loop: the loop readies the slot once it is known. */
  prompt: Prompter | Promise<Prompter>;
  sampling: Sampling;
  /** Ends the turn before its next batch. */
  signal: AbortSignal;
  /** Reply tokens at most (`onToken` says false at the last): no call steps past it. */
  maxTokens?: number;
  /** Prompt and reply tokens at most: see `GenerateRequest.budget`. */
  budget?: number;
  /** Each token's log-probability, and this many most likely tokens' (0 to 20): the reply runs one step a batch. */
  logprobs?: number;
  /**
   * Once the slot is readied, before the prompt's first batch. May answer with the reply's first
   * tokens, taken without sampling them (see `onToken`).
   */
  onPrompt?(prompt: ReadyPrompt): readonly Token[] | undefined;
  /**
   * Each sampled token, at once (with its log-probabilities when asked). True goes on; false ends
   * the turn (the token is then not evaluated); tokens go on with these after it, taken without
   * sampling them: each is handed here in turn (answered true or false), and the sampler counts
   * them as its own. Tokens may answer only the token that brings the reply to `mayForceAt`.
   */
  onToken(token: Token, logprobs?: TokenLogprobs): boolean | readonly Token[];
  /** The count of reply tokens at which `onToken` may answer with tokens: a native run of steps stops there. */
  mayForceAt?(): number;
}

export interface SchedulerOptions {
  /** Prompt tokens a step evaluates per prompt. */
  promptChunk: number;
  /** Where conversations' KV states are kept beyond their sequence. */
  kv?: KvStore;
  /** How prompts' ends ready at once are evaluated: one a batch, shortest first (default), or in one batch. */
  promptEnds?: Exclude<PromptEnds, "auto">;
  /** Whether replies' steps verify drafts of their own tokens (see `decodeSteps`): default `auto`. */
  speculate?: Speculate;
  /** Each native run's drafted tokens, and of those the ones accepted. */
  onDrafts?: (drafted: number, accepted: number) => void;
  /** Where replies' drafts come from instead of their own tokens (with `auto` or `draft`). */
  drafter?: DraftModel;
}

/**
 * Steps the running replies take per native call (`decodeSteps`): the JS thread wakes once per
 * this many batches, and the decode thread goes from one batch to the next without it. The
 * measurement that chose it is in docs/performance.md; the tokens reach the replies in bursts of
 * as many.
 */
const STEPS_PER_CALL = 4;

/**
 * With a draft model whose guesses do not pay, one native call in this many still asks it for a
 * token, so that its acceptance stays measured (a call without a draft checks no guess then).
 */
const DRAFT_PROBE_CALLS = 16;

/** The kinds of work, in the order a step serves them. */
const PROMPT_END = 0;
const REPLY = 1;
const PROMPT_CHUNK = 2;
/** An image's run of positions, evaluated by the projector in a batch of its own (llama-server's way too). */
const IMAGE = 3;

/**
 * With `promptEnds` "shortest", another prompt's end joins a batch only when it is this short. A
 * batch's fixed cost (reading every weight once, the graph) is worth only a few tokens'
 * computation on a CPU, and every end in a batch waits for all of its tokens: four 70-token ends
 * in one batch all give their first token after 280 tokens' work (llama-server's way); one a
 * batch, shortest first, after 70, 140, 210 and 280, for the same total work and three more fixed
 * costs. The first replies then pause while the later ends are evaluated: their first tokens come
 * sooner, their last ones no later.
 */
const SHARED_END_TOKENS = 4;

/** How a stepped reply ended: the tokens its sequence holds past its end, and why if it failed. */
interface Ending {
  decodedPast: number;
  failure?: unknown;
}

interface Job {
  turn: Turn;
  slot: Slot;
  /** Known once the prompt is fitted and the conversation's saved state looked for. */
  inputs?: { plan: Prompter; found?: Found };
  /** The save of the conversation the slot held: announced at once, captured by the loop's next task. */
  leaving?: Promise<void>;
  /** What the next batch evaluates for it: the prompt's rest, or the reply's last token; then any tokens the reply forced. */
  pending: readonly Token[];
  /** What the image placeholders among `pending` stand for. */
  images?: ReadonlyMap<Token, ImagePiece>;
  maxTokens: number;
  sampler: Sampler;
  /** The step in which it last had a batch. */
  stepped: number;
  /** Tokens handed to `onToken`. */
  given: number;
  /** How many tokens its steps draft: none where replies do not speculate. */
  draft?: DraftLength;
  end(error?: unknown): void;
}

type Batch = { job: Job; tokens: readonly Token[] }[];

/** A Preparing slot whose turn's prompt is known: the loop readies it before its next batch. */
const readyToPrepare = (job: Job) => job.slot.state === SlotState.Preparing && job.inputs !== undefined;

export class Scheduler {
  readonly slots: readonly Slot[];
  private readonly jobs = new Set<Job>();
  /** Work on the sequences asked for outside any turn, done before the next batch, in order. */
  private readonly tasks: (() => Promise<void>)[] = [];
  private step = 0;
  private running = false;
  private wakeLoop: (() => void) | undefined;
  /** Replies' steps are running natively: work for the loop aborts them. */
  private stepping = false;
  private readonly promptChunk: number;
  private readonly endsApart: boolean;
  private readonly kv: KvStore | undefined;
  private readonly speculate: Speculate;
  private readonly onDrafts: ((drafted: number, accepted: number) => void) | undefined;
  private readonly drafter: DraftModel | undefined;
  /** Where each user's next reply's guesses start. */
  private readonly priors = new AcceptancePriors();
  /** Native calls while the draft model did not pay: every `DRAFT_PROBE_CALLS`th probes it. */
  private unpaid = 0;

  constructor(
    private readonly context: LlamaContext,
    sequences: readonly LlamaContextSequence[],
    { promptChunk, kv, promptEnds = "shortest", speculate = "auto", onDrafts, drafter }: SchedulerOptions,
  ) {
    // A prompt's end must fit a batch, or no batch could ever take it.
    if (promptChunk > context.batchSize) throw new Error(`a prompt chunk of ${promptChunk} tokens exceeds the context's batch of ${context.batchSize}`);
    checkInternals(context, context.model, sequences[0]!);
    this.promptChunk = promptChunk;
    this.endsApart = promptEnds === "shortest";
    this.kv = kv;
    this.speculate = speculate;
    this.onDrafts = onDrafts;
    this.drafter = drafter;
    this.slots = sequences.map((sequence) => new Slot(sequence));
  }

  /**
   * Runs the turn on its slot (Idle, leased by the caller) to its end: `onToken` said stop, or the
   * signal aborted.
   */
  run(turn: Turn): Promise<void> {
    const { slot } = turn;
    if (slot.state !== SlotState.Idle) return Promise.reject(new Error(`sequence ${slot.id} is ${slot.state}`));
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    const onAbort = () => this.wake();
    const job: Job = {
      turn,
      slot,
      pending: [],
      maxTokens: 0,
      sampler: new Sampler(this.context, slot.sequence.model, turn.sampling),
      stepped: -1,
      given: 0,
      ...(this.speculate === "off" ? {} : { draft: this.priors.for(turn.scope) }),
      end: (error) => {
        if (!this.jobs.delete(job)) return;
        job.sampler.dispose();
        if (job.draft) this.priors.remember(turn.scope, job.draft);
        slot.state = SlotState.Idle;
        turn.signal.removeEventListener("abort", onAbort);
        // A slot no longer Preparing may free prompts waiting for it.
        this.wake();
        if (error === undefined) resolve();
        else reject(error);
      },
    };
    slot.state = SlotState.Preparing;
    const { kv } = this;
    // Announced now: that conversation's next turn, arriving on another slot before this one is
    // readied, waits for the state instead of loading an older one (kv-store.ts). Captured as the
    // loop's next task, while the prompt is still being fitted: the prompt then waits only for the
    // load and the erase.
    const held = slot.transcript;
    if (kv && held && held.key !== turn.key && !slot.saved) {
      const save = kv.save(held);
      job.leaving = this.perform(async () => {
        await save.capture(slot.sequence);
        if (slot.transcript === held) slot.saved = true;
      });
    }
    // States are swapped only when the slot holds another conversation.
    const found = kv && turn.key !== undefined && slot.transcript?.key !== turn.key ? kv.find(turn.key) : undefined;
    // Known at once, the prompt is readied before the next batch.
    if (typeof turn.prompt === "function" && !found) job.inputs = { plan: turn.prompt };
    else {
      Promise.all([turn.prompt, found]).then(
        ([plan, found]) => {
          job.inputs = { plan, ...(found ? { found } : {}) };
          this.interrupt();
        },
        (error: unknown) => job.end(error),
      );
    }
    turn.signal.addEventListener("abort", onAbort, { once: true });
    this.jobs.add(job);
    if (job.inputs) this.interrupt();
    this.start();
    return promise;
  }

  /** Empties the idle slots holding the conversation, and deletes its saved state. */
  async forget(key: string): Promise<void> {
    await this.perform(async () => {
      for (const slot of this.slots) if (slot.state === SlotState.Idle && slot.transcript?.key === key) await this.empty(slot);
    });
    await this.kv?.forget(key);
  }

  /** Empties every idle slot: nothing they hold is reused or saved. */
  clear(): Promise<void> {
    return this.perform(async () => {
      for (const slot of this.slots) if (slot.state === SlotState.Idle) await this.empty(slot);
    });
  }

  /** Saves what the idle slots hold, so it stays warm across a restart, and waits for the files. */
  async saveAll(): Promise<void> {
    const { kv } = this;
    if (!kv) return;
    await this.perform(async () => {
      for (const slot of this.slots) {
        if (slot.state !== SlotState.Idle || !slot.transcript || slot.saved) continue;
        await kv.save(slot.transcript).capture(slot.sequence);
        slot.saved = true;
      }
    });
    await kv.persist();
  }

  private async empty(slot: Slot): Promise<void> {
    slot.transcript = undefined;
    slot.saved = false;
    slot.scope = undefined;
    await slot.sequence.clearHistory();
  }

  /** Has the loop do `work` before its next batch. */
  private perform(work: () => Promise<void>): Promise<void> {
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    this.tasks.push(() => work().then(resolve, reject));
    this.interrupt();
    this.start();
    return promise;
  }

  private start(): void {
    this.wake();
    if (this.running) return;
    this.running = true;
    void this.loop();
  }

  private wake(): void {
    const wake = this.wakeLoop;
    this.wakeLoop = undefined;
    wake?.();
  }

  /** New work for the loop: replies stepping natively stop within the step in flight. */
  private interrupt(): void {
    if (this.stepping) abortSteps(this.context);
    this.wake();
  }

  /** A task, or a slot to ready: the loop has work that is not a batch. */
  private needsLoop(): boolean {
    return this.tasks.length > 0 || [...this.jobs].some(readyToPrepare);
  }

  private async loop(): Promise<void> {
    try {
      while (this.jobs.size > 0 || this.tasks.length > 0) {
        for (const job of this.jobs) if (job.turn.signal.aborted) job.end();
        const task = this.tasks.shift();
        if (task) {
          await task();
          continue;
        }
        const ready = [...this.jobs].filter(readyToPrepare);
        for (const job of ready) await this.ready(job);
        if (ready.length > 0) continue;
        const active = [...this.jobs].filter(({ slot }) => slot.state === SlotState.Prompt || slot.state === SlotState.Replying);
        const preparing = active.length < this.jobs.size;
        if (active.length === 0 || (!this.endsApart && preparing && !active.some(({ slot }) => slot.state === SlotState.Replying))) {
          await new Promise<void>((resolve) => (this.wakeLoop = resolve));
          continue;
        }
        const batch = this.nextBatch(active);
        if (batch.length === 0) {
          this.step++;
          continue;
        }
        await this.decode(batch, active);
      }
    } finally {
      this.running = false;
    }
  }

  /**
   * Readies the slot for the turn's prompt: the conversation it held saved (announced at `run`),
   * this one's saved state loaded, then all it holds beyond what the prompt may reuse erased. The
   * last prompt token is always evaluated again: its logits give the first reply token.
   */
  private async ready(job: Job): Promise<void> {
    const { slot, turn } = job;
    const { sequence } = slot;
    const { plan, found } = job.inputs!;
    try {
      // Done already: tasks come before slots are readied.
      await job.leaving;
      if (found && this.kv) {
        slot.transcript = await this.kv.load(sequence, found);
        slot.saved = slot.transcript !== undefined;
        // A conversation's saved state is its own user's: the one scope that made it.
        if (slot.transcript !== undefined) slot.scope = turn.scope;
      }
      const { tokens, reusable, drop, images } = plan(slot);
      if (tokens.length === 0) throw new Error("a turn evaluates at least one token");
      // Before the slot changes: the sequence keeps what it held, and nothing is evaluated.
      if (turn.budget !== undefined && tokens.length >= turn.budget) throw new BudgetExceeded(tokens.length, turn.budget);
      if (drop) await sequence.eraseContextTokenRanges([drop]);
      let cachedTokens = Math.min(sequence.compareContextTokens([...tokens]).firstDifferentIndex, tokens.length - 1, reusable);
      // An image is evaluated whole: a prompt reuses none of its cells or all.
      while (cachedTokens > 0 && isImagePosition(tokens[cachedTokens]!) && tokens[cachedTokens - 1] === tokens[cachedTokens]) cachedTokens--;
      if (isImagePosition(tokens.at(-1)!)) throw new Error("a prompt ends with text, not an image");
      slot.transcript = undefined;
      slot.scope = turn.scope;
      // A state with images is never saved: a loaded state's placeholders would no longer name its images.
      slot.saved = turn.key === undefined || tokens.some(isImagePosition);
      if (cachedTokens < sequence.nextTokenIndex) await sequence.eraseContextTokenRanges([{ start: cachedTokens, end: sequence.nextTokenIndex }]);
      job.pending = tokens.slice(cachedTokens);
      if (images) job.images = images;
      // Capped to the room left in the context: a shift mid-reply would make the prompt's token counts stale.
      job.maxTokens = replyRoom(Math.min(turn.maxTokens ?? Infinity, (turn.budget ?? Infinity) - tokens.length), this.context.contextSize, tokens.length);
      slot.state = SlotState.Prompt;
      const forced = turn.onPrompt?.({ tokens, cachedTokens, maxTokens: job.maxTokens });
      if (forced && forced.length > 0 && !this.force(job, forced)) job.end();
    } catch (error) {
      job.end(error);
    }
  }

  /** The lowest kind of work among the jobs this step has not served yet, as much as a batch holds. */
  private nextBatch(active: readonly Job[]): Batch {
    const candidates = active.filter((job) => job.stepped < this.step);
    if (candidates.length === 0) return [];
    const kinds = candidates.map((job) => this.kind(job));
    const first = kinds.reduce((lowest, kind) => Math.min(lowest, kind));
    let room = this.context.batchSize;
    const batch: Batch = [];
    const chosen = candidates.filter((_, i) => kinds[i] === first).sort((a, b) => a.pending.length - b.pending.length);
    // A batch of its own: the projector evaluates one image at a time.
    if (first === IMAGE) return [{ job: chosen[0]!, tokens: imageRun(chosen[0]!) }];
    for (const job of chosen) {
      const tokens = first === PROMPT_CHUNK ? job.pending.slice(0, Math.min(this.promptChunk, textRun(job))) : job.pending;
      if (tokens.length > room) break;
      if (first === PROMPT_END && this.endsApart && batch.length > 0 && tokens.length > SHARED_END_TOKENS) break;
      batch.push({ job, tokens });
      room -= tokens.length;
    }
    return batch.sort((a, b) => a.job.slot.id - b.job.slot.id);
  }

  private kind(job: Job): number {
    if (job.slot.state === SlotState.Replying) return REPLY;
    const text = textRun(job);
    if (text === 0) return IMAGE;
    return job.pending.length > this.promptChunk || text < job.pending.length ? PROMPT_CHUNK : PROMPT_END;
  }

  /** @param active the jobs past Preparing: a batch of all of them, all replying, may step */
  private async decode(batch: Batch, active: readonly Job[]): Promise<void> {
    if (this.steady(batch, active)) return await this.decodeSteps(batch.map(({ job }) => job));
    if (batch.length === 1 && isImagePosition(batch[0]!.tokens[0]!)) return await this.evaluateImage(batch[0]!.job, batch[0]!.tokens);
    const entries: BatchEntry[] = batch.map(({ job, tokens }) => {
      const samples = tokens.length === job.pending.length;
      if (samples) job.sampler.prepare();
      return { sequence: job.slot.sequence, tokens, ...(samples ? { sampler: job.sampler, logprobs: job.turn.logprobs } : {}) };
    });
    let sampled: (Sampled | undefined)[];
    try {
      sampled = await decodeBatch(this.context, entries);
    } catch (error) {
      for (const { job } of batch) job.end(error);
      return;
    }
    for (const [i, { job, tokens }] of batch.entries()) {
      job.stepped = this.step;
      const taken = sampled[i];
      if (taken === undefined) {
        job.pending = job.pending.slice(tokens.length);
        continue;
      }
      job.slot.state = SlotState.Replying;
      let more: boolean;
      try {
        more = this.give(job, taken.token, taken.logprobs);
      } catch (error) {
        job.end(error);
        continue;
      }
      if (!more) job.end();
    }
  }

  /** Evaluates the image run that begins the job's pending tokens through the projector. */
  private async evaluateImage(job: Job, run: readonly Token[]): Promise<void> {
    job.stepped = this.step;
    const image = job.images?.get(run[0]!);
    try {
      if (!image || run.length !== image.positions || run.some((token) => token !== run[0]))
        throw new Error("an image placeholder stands for no image of the prompt");
      await evalImage(job.slot.sequence, image, run[0]!);
    } catch (error) {
      job.end(error);
      return;
    }
    job.pending = job.pending.slice(run.length);
  }

  /**
   * Hands a sampled token to its reply, which may arm a lazy grammar for the next (see
   * `Sampler.prepare`) or force tokens after it: the job's pending tokens are then all of them.
   * False once the reply ends.
   */
  private give(job: Job, token: Token, logprobs?: TokenLogprobs): boolean {
    job.given++;
    job.sampler.sampled(token);
    job.pending = [token];
    const next = job.turn.onToken(token, logprobs);
    return typeof next === "boolean" ? next : this.force(job, next);
  }

  /** Hands the reply tokens it takes without sampling them, after its pending ones; false once it ends. */
  private force(job: Job, tokens: readonly Token[]): boolean {
    job.sampler.forced(tokens);
    for (const token of tokens) {
      job.given++;
      const next = job.turn.onToken(token);
      if (typeof next !== "boolean") throw new Error("a forced token cannot force more");
      if (!next) return false;
      job.pending = [...job.pending, token];
    }
    return true;
  }

  /**
   * The batch holds every job not Preparing, each a running reply the natives can step with one
   * token pending (none with forced tokens still to evaluate), none whose sampler may still change
   * between two of its tokens (a lazy grammar not yet armed) and none that wants its tokens'
   * log-probabilities (the steps sample without them).
   */
  private steady(batch: Batch, active: readonly Job[]): boolean {
    return (
      batch.length === active.length &&
      batch.every(
        ({ job }) =>
          job.slot.state === SlotState.Replying &&
          job.pending.length === 1 &&
          job.sampler.settled &&
          job.turn.logprobs === undefined &&
          canDecodeSteps(this.context, job.slot.sequence),
      )
    );
  }

  /**
   * Replies with nothing else to decode beside them: several steps a native call, no reply past its
   * `maxTokens` or `mayForceAt`, aborted by new work for the loop. Each reply's step verifies its
   * draft too (see `draftLength`). Where a reply ends inside them, the tokens decoded past its end
   * are taken back out of its sequence before its turn ends, so it holds what one step a batch leaves.
   *
   * The next call is under way while a call's tokens are handed to the replies (see `goesOn`): the
   * decode thread then never waits for this thread's work on them, which on a GPU is a step's
   * worth every few steps. A reply that ends meanwhile aborts that call, and the tokens it decoded
   * for that reply are taken back too.
   */
  private async decodeSteps(jobs: readonly Job[]): Promise<void> {
    const draft = this.draftLength(jobs);
    const proposals = draft ? await this.propose(jobs, draft) : undefined;
    const ended = new Map<Job, Ending>();
    this.stepping = true;
    try {
      // Asked once the lock is taken: an abort before the call began would not reach it. A draft
      // model proposes one step's drafts: the next step's come from it again.
      let call: Promise<Stepped[]> | undefined = this.stepCall(jobs, draft, proposals);
      while (call) {
        let stepped: Stepped[];
        try {
          stepped = await call;
        } catch (error) {
          for (const job of jobs) if (!ended.has(job)) job.end(error);
          break;
        }
        call = undefined;
        // A reply that ended while this call ran: all it decoded for it was past its end.
        for (const [i, job] of jobs.entries()) {
          const end = ended.get(job);
          if (end) end.decodedPast += stepped[i]!.tokens.length;
        }
        // None when work for the loop came before the steps began or aborted the first.
        if (stepped.every(({ tokens }) => tokens.length === 0)) break;
        let drafted = 0;
        let accepted = 0;
        for (const [i, job] of jobs.entries()) {
          drafted += stepped[i]!.drafted;
          accepted += stepped[i]!.accepted;
          job.draft?.update(stepped[i]!.tried, stepped[i]!.right);
        }
        if (drafted > 0) this.onDrafts?.(drafted, accepted);
        if (ended.size === 0 && this.goesOn(jobs, stepped)) call = this.stepCall(jobs, this.draftLength(jobs), undefined, stepped);
        for (const [i, job] of jobs.entries()) if (!ended.has(job)) this.hand(job, stepped[i]!.tokens, ended);
        if (call && ended.size > 0) abortSteps(this.context);
      }
    } finally {
      this.stepping = false;
    }
    for (const [job, { decodedPast, failure }] of ended) await this.endStepped(job, decodedPast, failure);
  }

  /**
   * A native run of steps for the replies, each from its pending token, or with `before` (the
   * tokens of the run before, not yet handed to them) from the last of those.
   */
  private stepCall(jobs: readonly Job[], draft: number | undefined, proposals: Token[][] | undefined, before?: Stepped[]): Promise<Stepped[]> {
    const entries = jobs.map((job, i) => {
      const ahead = before?.[i]?.tokens ?? [];
      return {
        sequence: job.slot.sequence,
        token: ahead.at(-1) ?? job.pending[0]!,
        sampler: job.sampler,
        limit: Math.max(1, Math.min(job.maxTokens, job.turn.mayForceAt?.() ?? Infinity) - job.given - ahead.length),
        ...(draft === undefined ? {} : { draft }),
        ...(proposals ? { proposal: proposals[i]! } : {}),
      };
    });
    const steps = proposals ? 1 : STEPS_PER_CALL;
    return decodeSteps(this.context, entries, () => (this.needsLoop() ? 0 : steps));
  }

  /**
   * Whether the next run of steps may begin before this one's tokens are handed out: no work for
   * the loop, no draft model (its proposals come from the tokens handed out), and every reply
   * going on past them as far as the natives know (no end of generation, room under its limit)
   * and never to have tokens forced (a forced token must come before the steps after it).
   */
  private goesOn(jobs: readonly Job[], stepped: readonly Stepped[]): boolean {
    if (this.drafter || this.needsLoop()) return false;
    const { model } = this.context;
    return jobs.every((job, i) => {
      const { tokens } = stepped[i]!;
      const last = tokens.at(-1);
      return (
        last !== undefined &&
        !model.isEogToken(last) &&
        !job.turn.signal.aborted &&
        (job.turn.mayForceAt?.() ?? Infinity) === Infinity &&
        job.maxTokens - job.given - tokens.length >= 1
      );
    });
  }

  /** Hands a run's tokens to the reply; where it ends, `ended` notes how many were decoded past its end. */
  private hand(job: Job, tokens: readonly Token[], ended: Map<Job, Ending>): void {
    job.stepped = this.step;
    for (const [at, token] of tokens.entries()) {
      // As before a batch: an abort, or the context's disposal (taking back fails then, and the
      // turn ends with that error), ends the turn with the token given last unevaluated.
      if (at > 0 && (job.turn.signal.aborted || this.context.disposed)) {
        ended.set(job, { decodedPast: tokens.length - at });
        return;
      }
      // Ending the reply, this token is unevaluated; the ones after it were decoded.
      try {
        if (!this.give(job, token)) {
          ended.set(job, { decodedPast: tokens.length - 1 - at });
          return;
        }
        // `mayForceAt` ends the run where tokens may be forced: the steps past them would be wrong.
        if (job.pending.length > 1 && at < tokens.length - 1) throw new Error("a reply forced tokens inside a native run of steps");
      } catch (failure) {
        ended.set(job, { decodedPast: tokens.length - 1 - at, failure });
        return;
      }
    }
  }

  /**
   * The replies' draft length for the next steps, alike for all: llama.cpp computes a batch whose
   * sequences bring different token counts in several pieces, each a read of every weight (the
   * natives pad a shorter guess). `draftLength` weighs what it gains against what it costs, within
   * the batch; with `lookup`, at least one token. None with `off`: the natives then guess nothing.
   * With a draft model the acceptance is its guesses' only: where drafting does not pay, a call
   * checks no guess (the lookup's would say nothing of the draft model's), but now and then one
   * token of it is drafted.
   */
  private draftLength(jobs: readonly Job[]): number | undefined {
    if (this.speculate === "off") return undefined;
    const length = draftLength(
      jobs.map((job) => job.draft!.acceptance),
      Math.floor(this.context.batchSize / jobs.length) - 1,
      this.speculate !== "auto",
      this.drafter?.weight,
    );
    if (!this.drafter || length > 0) return length;
    return ++this.unpaid % DRAFT_PROBE_CALLS === 0 ? 1 : undefined;
  }

  /**
   * The draft model's guesses of `length` tokens for each reply, or none without a draft model. A
   * failure there costs the step its guesses, never the reply.
   */
  private async propose(jobs: readonly Job[], length: number): Promise<Token[][] | undefined> {
    if (!this.drafter) return undefined;
    const requests = jobs.map(({ slot, turn, pending }) => {
      const tokens = [...afterImages(slot.sequence.contextTokens), pending[0]!];
      return { slot: slot.id, scope: turn.scope, tokens };
    });
    return await this.drafter.propose(requests, length).catch(() => jobs.map(() => []));
  }

  /** Ends a stepped reply's turn once the last `decodedPast` tokens its sequence holds are taken back out. */
  private async endStepped(job: Job, decodedPast: number, failure?: unknown): Promise<void> {
    try {
      await dropLast(this.context, job.slot.sequence, decodedPast);
    } catch (error) {
      failure ??= error;
    }
    job.end(failure);
  }
}

/** How many of the job's pending tokens come before the first image placeholder. */
function textRun(job: Job): number {
  const at = job.pending.findIndex(isImagePosition);
  return at < 0 ? job.pending.length : at;
}

/** The placeholders of the image that begins the job's pending tokens (the same picture twice in a row is two runs). */
function imageRun(job: Job): readonly Token[] {
  const first = job.pending[0]!;
  const positions = job.images?.get(first)?.positions ?? 1;
  return job.pending.slice(0, positions);
}
