/**
 * The one loop that decodes for all sequences of a context: each step gives every running reply
 * its next token in one llama.cpp batch, and evaluates a chunk of each long prompt beside them,
 * so a long prompt never freezes the replies already streaming (llama-server's continuous
 * batching). A reply's sampled token is handed to its turn synchronously (which turns it into text
 * and checks the stops), and the next batch goes out at once: the rest of the consumers' work (the
 * HTTP stream) runs while llama.cpp decodes, not between two decodes.
 *
 * One kind of work per batch, in this order within a step:
 * 1. Prompts' ends, which give new replies their first token: a request that arrives while others
 *    decode waits only for the batch in flight and its own prompt.
 * 2. Running replies' next tokens.
 * 3. Chunks of long prompts, one per prompt and step.
 * Mixing kinds would save nothing: llama.cpp computes a batch whose sequences bring different token
 * counts as one piece of a token per sequence, then the rest. Within a batch the sequences go in
 * ascending id: node-llama-cpp keeps a KV cache per sequence, and llama.cpp computes a batch in one
 * piece only where the ids go up one by one (`split_equal`); in arrival order, four replies' batches
 * were computed in two pieces and took 3.3 times a 1-token batch instead of 2.
 *
 * Replies decoding with nothing else to do (every job replying) run `STEPS_PER_CALL` steps a
 * native call where the compiled natives allow it (`decodeSteps` in src/natives/addon.ts): their tokens
 * reach their turns in bursts. A turn that needs the context aborts the call within the step in
 * flight: as its sequence is readied (the gate held) and as it reaches `run`. Its prompt then waits
 * for no reply's step; the replies lose the aborted part of one.
 */
import type { LlamaContext, LlamaContextSequence, Token } from "node-llama-cpp";
import type { DispatchGate } from "./dispatch-gate";
import { abortSteps, canDecodeSteps, decodeBatch, decodeSteps, dropLast, Sampler, sequenceIdOf, type BatchEntry } from "../natives/addon";
import type { Sampling } from "./types";

export interface Turn {
  sequence: LlamaContextSequence;
  /** Evaluated after what the sequence holds; the last token's logits give the first reply token. */
  input: readonly Token[];
  sampling: Sampling;
  /** Ends the turn before its next batch. */
  signal: AbortSignal;
  /** Each sampled token, at once; false ends the turn (the token is then not evaluated). */
  onToken(token: Token): boolean;
  /** Tokens `onToken` takes at most (it says false at the last): no call steps past it. */
  maxTokens?: number;
}

/**
 * Steps the running replies take per native call (`decodeSteps`): the JS thread wakes once per
 * this many batches instead of once (or more) per batch, and the decode thread goes from one batch
 * to the next without it. Four steps reached llama-server's rate for one stream where one step a
 * call did not, and more steps gained nothing (docs/performance.md); the tokens reach the replies
 * in bursts of as many.
 */
const STEPS_PER_CALL = 4;

/** The kinds of work, in the order a step serves them. */
const PROMPT_END = 0;
const REPLY = 1;
const PROMPT_CHUNK = 2;

interface Job {
  turn: Turn;
  id: number;
  /** What the next batch evaluates for it: the prompt's rest, or the reply's last token. */
  pending: readonly Token[];
  replying: boolean;
  sampler: Sampler;
  /** The step in which it last had a batch. */
  stepped: number;
  /** Tokens handed to `onToken`. */
  given: number;
  end(error?: unknown): void;
}

export class Scheduler {
  private readonly jobs = new Set<Job>();
  private step = 0;
  private running = false;
  /** Turns announced (`expect`) and not yet run, and the loop waiting for them. */
  private expected = 0;
  private arrivals: (() => void)[] = [];
  /** Replies' steps are running natively: a turn that needs the context aborts them. */
  private stepping = false;

  /**
   * @param promptChunk prompt tokens a step evaluates per prompt
   * @param gate new batches wait while a sequence is readied for a prompt (its state saved or loaded, tokens erased)
   */
  constructor(
    private readonly context: LlamaContext,
    private readonly promptChunk: number,
    private readonly gate: DispatchGate,
  ) {
    // A prompt's end must fit a batch, or no batch could ever take it.
    if (promptChunk > context.batchSize) throw new Error(`a prompt chunk of ${promptChunk} tokens exceeds the context's batch of ${context.batchSize}`);
    // Readying a sequence takes the context's lock, which the call holds.
    gate.onHold(() => this.abortSteps());
  }

  /**
   * Announces a turn whose sequence is being prepared (its prompt fitted, a KV state saved or
   * loaded, what it does not share erased); the function returned says it reached `run` or failed.
   * While no reply is running, batches wait for the turns announced. Requests that arrive together
   * reach `run` one after another, each after its own awaits, and preparing a sequence takes the
   * context's lock, which a batch holds: the first prompt's batch went alone and the others waited
   * for it, their first tokens far apart while that stream decoded alone. While replies run,
   * nothing waits: a prompt arriving then joins
   * the next step, as before.
   */
  expect(): () => void {
    this.expected++;
    let arrived = false;
    return () => {
      if (arrived) return;
      arrived = true;
      if (--this.expected === 0) for (const wake of this.arrivals.splice(0)) wake();
    };
  }

  /** Runs the turn to its end: `onToken` said stop, or the signal aborted. */
  run(turn: Turn): Promise<void> {
    if (turn.input.length === 0) return Promise.reject(new Error("a turn evaluates at least one token"));
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    const sampler = new Sampler(this.context, turn.sequence.model, turn.sampling);
    const job: Job = {
      turn,
      id: sequenceIdOf(turn.sequence),
      pending: turn.input,
      replying: false,
      sampler,
      stepped: -1,
      given: 0,
      end: (error) => {
        if (!this.jobs.delete(job)) return;
        sampler.dispose();
        if (error === undefined) resolve();
        else reject(error);
      },
    };
    this.jobs.add(job);
    this.abortSteps();
    if (!this.running) {
      this.running = true;
      // A turn later, so requests received in the same turn of the event loop are announced first.
      setImmediate(() => void this.loop());
    }
    return promise;
  }

  private async loop(): Promise<void> {
    try {
      while (this.jobs.size > 0) {
        const closed = this.gate.open();
        if (closed) {
          await closed;
          // Whoever held the gate readied a sequence, and reaches `run` in microtasks from here:
          // one macrotask later its prompt is in the next batch. Going at once, the batch left it
          // out, and with replies running the prompt waited a whole step more for its first token.
          await new Promise<void>((resolve) => setImmediate(resolve));
          continue;
        }
        for (const job of this.jobs) if (job.turn.signal.aborted) job.end();
        if (this.expected > 0 && ![...this.jobs].some((job) => job.replying)) {
          await new Promise<void>((resolve) => this.arrivals.push(resolve));
          continue;
        }
        const batch = this.nextBatch();
        if (batch.length === 0) {
          this.step++;
          continue;
        }
        await this.decode(batch);
      }
    } finally {
      this.running = false;
    }
  }

  /** The lowest kind of work among the jobs this step has not served yet, as much as a batch holds. */
  private nextBatch(): { job: Job; tokens: readonly Token[] }[] {
    const candidates = [...this.jobs].filter((job) => job.stepped < this.step);
    if (candidates.length === 0) return [];
    const kinds = candidates.map((job) => this.kind(job));
    const first = Math.min(...kinds);
    let room = this.context.batchSize;
    const batch: { job: Job; tokens: readonly Token[] }[] = [];
    const chosen = candidates.filter((_, i) => kinds[i] === first).sort((a, b) => a.pending.length - b.pending.length);
    for (const job of chosen) {
      const tokens = first === PROMPT_CHUNK ? job.pending.slice(0, this.promptChunk) : job.pending;
      if (tokens.length > room) break;
      batch.push({ job, tokens });
      room -= tokens.length;
    }
    return batch.sort((a, b) => a.job.id - b.job.id);
  }

  private kind(job: Job): number {
    if (job.replying) return REPLY;
    return job.pending.length > this.promptChunk ? PROMPT_CHUNK : PROMPT_END;
  }

  private async decode(batch: { job: Job; tokens: readonly Token[] }[]): Promise<void> {
    if (this.steady(batch)) return await this.decodeSteps(batch.map(({ job }) => job));
    const entries: BatchEntry[] = batch.map(({ job, tokens }) => ({
      sequence: job.turn.sequence,
      tokens,
      sampler: tokens.length === job.pending.length ? job.sampler : undefined,
    }));
    let sampled: (Token | undefined)[];
    try {
      sampled = await decodeBatch(this.context, entries);
    } catch (error) {
      for (const { job } of batch) job.end(error);
      return;
    }
    for (const [i, { job, tokens }] of batch.entries()) {
      job.stepped = this.step;
      const token = sampled[i];
      if (token === undefined) {
        job.pending = job.pending.slice(tokens.length);
        continue;
      }
      job.replying = true;
      job.pending = [token];
      let more: boolean;
      try {
        more = this.give(job, token);
      } catch (error) {
        job.end(error);
        continue;
      }
      if (!more) job.end();
    }
  }

  private give(job: Job, token: Token): boolean {
    job.given++;
    return job.turn.onToken(token);
  }

  /** The batch holds every job, each a running reply the natives can step. */
  private steady(batch: readonly { job: Job }[]): boolean {
    return batch.length === this.jobs.size && batch.every(({ job }) => job.replying && canDecodeSteps(this.context, job.turn.sequence));
  }

  /** Ends the native steps in flight, if any, within their current step. */
  private abortSteps(): void {
    if (this.stepping) abortSteps(this.context);
  }

  /**
   * Replies with nothing else to decode beside them: several steps a native call, no more than the
   * closest reply's `maxTokens` needs, aborted by a turn that needs the context. Where a reply ends
   * inside them, the tokens decoded past its end are taken back out of its sequence before its
   * turn ends, so it holds what one step a batch leaves.
   */
  private async decodeSteps(jobs: readonly Job[]): Promise<void> {
    let tokens: Token[][];
    this.stepping = true;
    try {
      const entries = jobs.map((job) => ({ sequence: job.turn.sequence, token: job.pending[0]!, sampler: job.sampler }));
      // Asked once the lock is taken: an abort before the call began would not reach it. Jobs are
      // only added while the call runs (one more means a turn arrived); the gate is held while a
      // sequence is readied.
      const steps = () =>
        this.jobs.size !== jobs.length || this.gate.held ? 0 : Math.max(1, Math.min(STEPS_PER_CALL, ...jobs.map((job) => (job.turn.maxTokens ?? Infinity) - job.given)));
      tokens = await decodeSteps(this.context, entries, steps);
    } catch (error) {
      for (const job of jobs) job.end(error);
      return;
    } finally {
      this.stepping = false;
    }
    const taken = tokens[0]!.length;
    // None when a turn arrived before the steps began or aborted the first: the next batch takes it.
    if (taken === 0) return;
    for (const job of jobs) job.stepped = this.step;
    const ended = new Map<Job, { decodedPast: number; failure?: unknown }>();
    // Step by step, as the batches would have given them.
    for (let step = 0; step < taken; step++) {
      for (const [i, job] of jobs.entries()) {
        if (ended.has(job)) continue;
        // As before a batch: an abort, or the context's disposal (taking back fails then, and the
        // turn ends with that error), ends the turn with the token given last unevaluated.
        if (step > 0 && (job.turn.signal.aborted || this.context.disposed)) {
          ended.set(job, { decodedPast: taken - step });
          continue;
        }
        const token = tokens[i]![step]!;
        job.pending = [token];
        // Ending the reply, this token is unevaluated; the ones after it were decoded.
        try {
          if (!this.give(job, token)) ended.set(job, { decodedPast: taken - 1 - step });
        } catch (failure) {
          ended.set(job, { decodedPast: taken - 1 - step, failure });
        }
      }
    }
    for (const [job, { decodedPast, failure }] of ended) await this.endStepped(job, decodedPast, failure);
  }

  /** Ends a stepped reply's turn once the last `decodedPast` tokens its sequence holds are taken back out. */
  private async endStepped(job: Job, decodedPast: number, failure?: unknown): Promise<void> {
    try {
      await dropLast(this.context, job.turn.sequence, decodedPast);
    } catch (error) {
      failure ??= error;
    }
    job.end(failure);
  }
}
