/**
 * The inference engine: one model, one context split into `parallel` sequences. It knows nothing
 * of HTTP or storage; callers hand it a conversation and stream the reply. Each sequence keeps
 * the exact tokens of the conversation it last served (see transcript.ts), so a follow-up turn
 * evaluates only its new tokens.
 */
import { stat } from "node:fs/promises";
import { basename, resolve } from "node:path";
import {
  getLlama,
  getModuleVersion,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaModel,
  type Token,
} from "node-llama-cpp";
import { resolveModelChatWrapper } from "./chat-wrapper";
import { DispatchGate } from "./dispatch-gate";
import { chatStops, type ChatStops } from "./chat-stops";
import { bridge } from "./bridge";
import { decode, type Decoded, type StopReason } from "./decode";
import { KvStore, stateSizeBound } from "./kv-store";
import { checkInternals } from "../natives/addon";
import { IN_EXECUTABLE, useLocalNatives } from "../natives/local";
import { checkNodeLlamaCppVersion } from "../natives/version";
import { type PoolStats, SequencePool } from "./pool";
import { PromptRenderer, sharedPrefix, type FittedPrompt } from "./prompt";
import { Scheduler } from "./scheduler";
import { thoughtMarkersOf, type ThoughtMarkers } from "./thought-text";
import { continueTranscript, isReplyOf, type Transcript } from "./transcript";
import { type FinishReason, type FlashAttentionMode, type GenerateRequest, type GenerateResult, type ReasoningMode, type ReplyPiece, samplingOf } from "./types";

export type * from "./types";

export interface EngineOptions {
  modelPath: string;
  /** Tokens per sequence. Default: the model's training context, capped at 4096. */
  contextSize?: number;
  /** Sequences, i.e. replies generated at once. Default 2. */
  parallel?: number;
  /**
   * CPU threads. Default: 1 for tiny models, else llama.cpp's count of math cores. Always applied
   * explicitly, because node-llama-cpp's own default (at least 4) oversubscribes small machines badly.
   */
  threads?: number;
  /** Default false: CPU only. */
  gpu?: boolean;
  /** Requests allowed to wait for a free sequence before `overloaded`. Default 64. */
  queueMax?: number;
  /** Use `bun run natives`' build when present (default true); false forces the npm prebuilt. */
  localNatives?: boolean;
  /** Where to remember what is slow to work out about a model (its chat format). */
  cacheDir?: string;
  /** Where to keep conversations' KV states beyond their sequence, and how many bytes at most. */
  kvCache?: { dir: string; maxBytes: number };
  /** Failures that cost only speed (a KV state not saved), reported instead of thrown. */
  onWarning?: (message: string, error: unknown) => void;
  /** A reasoning model's thought: apart from the answer (default), hidden, or left inline. */
  reasoning?: ReasoningMode;
  /**
   * Prompt tokens evaluated per step: a longer prompt takes several steps, and each step gives the
   * running replies their next token before the chunk (scheduler.ts).
   */
  batchSize?: number;
  flashAttention?: FlashAttentionMode;
}

const DEFAULT_CONTEXT_CAP = 4096;
const DEFAULT_BATCH_SIZE = 512;
/** A stateless prompt's transcript key: it belongs to no conversation (and is never saved). */
const NO_CONVERSATION = "";

/** How replies' thoughts are told apart, for a chat format that has them and unless they stay inline. */
interface Thoughts {
  markers: ThoughtMarkers;
  /** Told apart, then left out of what the engine yields and returns. */
  hidden: boolean;
}

interface Slot {
  sequence: LlamaContextSequence;
  /** What the sequence holds, when known token for token. */
  transcript?: Transcript;
  /** The transcript's state is on disk as it is now. */
  saved: boolean;
  /** The `cacheScope` of the requests whose KV state the sequence holds. */
  scope?: string;
}

export class Engine {
  private disposed = false;
  /** Unix seconds: OpenAI's model listing shows when a model was "created". */
  readonly loadedAt = Math.floor(Date.now() / 1000);

  private constructor(
    private readonly llama: Llama,
    private readonly model: LlamaModel,
    private readonly context: LlamaContext,
    private readonly slots: readonly Slot[],
    private readonly pool: SequencePool<Slot>,
    private readonly kv: KvStore | undefined,
    private readonly gate: DispatchGate,
    private readonly scheduler: Scheduler,
    private readonly prompts: PromptRenderer,
    private readonly stops: ChatStops,
    private readonly thoughts: Thoughts | undefined,
    readonly modelName: string,
    /** Where the native binaries came from: the local build's directory, "embedded" in the executable, or "prebuilt". */
    readonly natives: string,
  ) {}

  static async load(options: EngineOptions): Promise<Engine> {
    const { modelPath, parallel = 2, gpu = false, queueMax = 64 } = options;
    checkNodeLlamaCppVersion(await getModuleVersion(), "loading the model");
    const natives = options.localNatives === false ? undefined : await useLocalNatives();
    const llama = await getLlama({ gpu: gpu ? "auto" : false, build: gpu ? "auto" : "never" });
    try {
      const model = await llama.loadModel({ modelPath, gpuLayers: gpu ? "auto" : 0 });
      const threads = options.threads ?? defaultThreads(llama, model);
      const promptChunk = options.batchSize ?? DEFAULT_BATCH_SIZE;
      llama.maxThreads = threads;
      const context = await model.createContext({
        contextSize: options.contextSize ?? Math.min(model.trainContextSize, DEFAULT_CONTEXT_CAP),
        sequences: parallel,
        threads,
        // A batch holds prompt chunks or every sequence's next token (scheduler.ts); the sum is
        // the room a batch mixing both had, kept so llama.cpp's batch size did not change.
        batchSize: promptChunk + parallel,
        // "auto" is on: in `bun run bench attention` on bench-small, decode was never slower with it
        // and faster after a short prompt (llama-server's default too); see docs/performance.md.
        flashAttention: options.flashAttention !== "off",
      });
      const chatWrapper = resolveModelChatWrapper(model, options.cacheDir);
      const reasoning = options.reasoning ?? "separate";
      const markers = reasoning === "inline" ? undefined : thoughtMarkersOf(chatWrapper);
      const slots = Array.from({ length: parallel }, (): Slot => ({ sequence: context.getSequence(), saved: false }));
      checkInternals(context, model, slots[0]!.sequence);
      const gate = new DispatchGate();
      const name = model.fileInfo.metadata.general?.name;
      const warn = options.onWarning ?? (() => {});
      const kv = options.kvCache && options.kvCache.maxBytes > 0 ? await openKvStore(options.kvCache, modelPath, llama, model, context, warn) : undefined;
      const engine = new Engine(
        llama,
        model,
        context,
        slots,
        new SequencePool(slots, queueMax),
        kv,
        gate,
        new Scheduler(context, promptChunk, gate),
        new PromptRenderer(model, chatWrapper),
        chatStops(model, chatWrapper),
        markers && { markers, hidden: reasoning === "hide" },
        typeof name === "string" && name.trim() !== "" ? name : basename(modelPath).replace(/\.gguf$/i, ""),
        natives ?? (IN_EXECUTABLE ? "embedded" : "prebuilt"),
      );
      await engine.warmUp();
      return engine;
    } catch (err) {
      await llama.dispose();
      throw err;
    }
  }

  /**
   * One short stateless reply before the engine serves, then every sequence emptied. Without it,
   * a fresh server's first request paid for llama.cpp's first decodes and for the JIT compiling
   * the prompt's path beside its prompt's decode, in its time to first token (docs/performance.md).
   * llama-server warms up too.
   */
  private async warmUp(): Promise<void> {
    const reply = this.generate({ cacheScope: "", history: [{ role: "user", content: "Hello" }], temperature: 0, maxTokens: 2 });
    while (!(await reply.next()).done);
    for (const slot of this.slots) await this.empty(slot);
  }

  /** Tokens per sequence, as created (llama.cpp may round the request up). */
  get contextSize(): number {
    return this.context.contextSize;
  }

  /**
   * Characters of history, counted back from the newest turn, that a prompt can reach: a caller may
   * leave older turns out of `history` without changing the prompt (see PromptRenderer.historyChars).
   */
  get historyChars(): number {
    return this.prompts.historyChars(this.context.contextSize);
  }

  /** CPU threads inference runs on. */
  get threads(): number {
    return this.llama.maxThreads;
  }

  stats(): PoolStats {
    return this.pool.stats();
  }

  /** Replies that may be in hand at once: one generating per sequence, `queueMax` waiting. */
  get capacity(): number {
    return this.pool.capacity;
  }

  /**
   * Waits for a free sequence, then yields the reply's text pieces as they are generated: a
   * reasoning model's thought first, tagged as such, then its answer.
   * An abort while queued throws an `AbortError`; an abort (or `return()`) during generation
   * stops within a token or so and returns the partial reply as `cancelled`.
   */
  async *generate(request: GenerateRequest): AsyncGenerator<ReplyPiece, GenerateResult, void> {
    if (this.disposed) throw new Error("Engine is disposed");
    const key = request.conversationKey;
    const scope = request.cacheScope;
    const budget = this.promptBudget(request.maxTokens);
    // A stateless prompt is fitted before a sequence is chosen: its tokens choose it.
    const statelessPrompt = key === undefined ? await this.prompts.fit(request.history, budget) : undefined;
    const lease = await this.pool.acquire(key ?? ((slot) => this.prefixScore(slot, statelessPrompt!, budget, scope)), request.signal);
    // Until the scheduler has the turn, batches of prompts alone wait for it (Scheduler.expect).
    const arrived = this.scheduler.expect();
    // Also stops generation when the consumer quits early (`return()`), so the sequence comes back.
    const stop = new AbortController();
    let running: Promise<Decoded> | undefined;
    try {
      const slot = lease.item;
      const { sequence } = slot;
      const left = this.leave(slot, key);
      const fitted = statelessPrompt ?? (await this.prompts.fit(request.history, budget));
      const opening = await this.prompts.opening(request.history.slice(0, request.publicTurns ?? 0));
      const { tokens, cachedTokens } = await this.claim(slot, { key, scope, opening }, fitted, budget, left);
      const signal = request.signal ? AbortSignal.any([request.signal, stop.signal]) : stop.signal;
      const said = { content: "", reasoning: "" };

      const decoded = yield* bridge<ReplyPiece, Decoded>((emit) => {
        running = decode(
          sequence,
          tokens.slice(cachedTokens),
          {
            sampling: samplingOf(request),
            // Capped to the room left in the context: a shift mid-reply would make the token
            // counts and `prompt` stale. (At least 1, so a full context still answers.)
            maxTokens: Math.max(1, Math.min(request.maxTokens, this.contextSize - tokens.length - 1)),
            signal,
            endsReply: this.stops.endsReply,
            stopStrings: [...this.stops.texts, ...(request.stop ?? [])],
            thought: this.thoughts?.markers,
            scheduler: this.scheduler,
          },
          (piece) => {
            if (piece.kind === "reasoning" && this.thoughts?.hidden) return;
            said[piece.kind] += piece.text;
            emit(piece);
          },
        );
        arrived();
        // The sequence is free once evaluation ends, even while the consumer still reads buffered pieces.
        void running.then(
          (result) => {
            slot.transcript = this.transcriptAfter(key ?? NO_CONVERSATION, fitted, tokens, result.spelled);
            lease.release();
          },
          lease.release,
        );
        return running;
      });

      const model = this.model;
      return {
        text: said.content,
        ...(said.reasoning !== "" ? { reasoning: said.reasoning } : {}),
        finishReason: finishReason(decoded.stopReason),
        promptTokens: tokens.length,
        cachedTokens,
        completionTokens: decoded.tokens.length,
        // Rendered on demand: detokenizing the whole history on every turn would be work no caller needs.
        get prompt() {
          return model.detokenize(tokens, true);
        },
      };
    } finally {
      arrived();
      stop.abort();
      await running?.catch(() => undefined);
      lease.release();
    }
  }

  /**
   * Drops what the engine keeps of a conversation: the transcript of an idle sequence that holds
   * it (so it is neither reused nor saved again) and its saved KV state. For a deleted
   * conversation; call when none of its replies is running.
   */
  async forget(conversationKey: string): Promise<void> {
    for (const slot of this.slots) if (slot.transcript?.key === conversationKey) await this.empty(slot);
    await this.kv?.forget(conversationKey);
  }

  /** The sequence holds nothing, and nothing of it is kept to be saved or reused. */
  private async empty(slot: Slot): Promise<void> {
    slot.transcript = undefined;
    slot.saved = false;
    slot.scope = undefined;
    await slot.sequence.clearHistory();
  }

  /**
   * Releases the model and native memory, saving live conversations' KV states first so they stay
   * warm across a restart. Waiting requests fail; call after in-flight ones end.
   */
  async close(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    this.pool.close(new Error("Engine is disposed"));
    for (const slot of this.slots) await this.saveState(slot);
    await this.kv?.settled();
    await this.context.dispose();
    await this.model.dispose();
    await this.llama.dispose();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /**
   * Readies the sequence for the prompt: the conversation it held saved, and this one's state
   * loaded, if it held another (with saved states on); then all it holds beyond what the prompt
   * may reuse erased. A prompt reuses what the sequence holds only when that was made in its own
   * scope; otherwise no more of it than the prompt's `opening`, the part any user's prompt shares.
   * New batches wait meanwhile (dispatch-gate.ts): the erase takes the context's lock, so a batch
   * going out first would delay it by one more step, and the prompt would miss the batch right after.
   */
  private async claim(
    slot: Slot,
    { key, scope, opening }: { key: string | undefined; scope: string; opening: readonly Token[] },
    fitted: FittedPrompt,
    budget: number,
    left: Promise<void>,
  ): Promise<{ tokens: Token[]; cachedTokens: number }> {
    const take = async () => {
      const { sequence } = slot;
      const own = slot.scope === scope;
      const tokens = own ? this.promptTokens(slot, key, fitted, budget) : fitted.tokens;
      // The last prompt token is always evaluated again: its logits give the first reply token.
      let cachedTokens = Math.min(sequence.compareContextTokens(tokens).firstDifferentIndex, tokens.length - 1);
      if (!own) cachedTokens = Math.min(cachedTokens, sharedPrefix(tokens, opening));
      slot.transcript = undefined;
      slot.scope = scope;
      // A stateless prompt's state is never saved: its client sends the prompt again.
      slot.saved = key === undefined;
      if (cachedTokens < sequence.nextTokenIndex) {
        await sequence.eraseContextTokenRanges([{ start: cachedTokens, end: sequence.nextTokenIndex }]);
      }
      return { tokens, cachedTokens };
    };
    // States are swapped only when the sequence holds another conversation (with saved states on).
    const kv = slot.transcript?.key === key ? undefined : this.kv;
    // Checked first: reading and hashing the file needs no sequence, so batches go on meanwhile.
    const found = kv && key !== undefined ? await kv.find(key) : undefined;
    // New batches wait for the load and the erase (and the save, if still under way), so requests
    // arriving together share their prompts' batch, and the prompt joins the batch right after
    // (dispatch-gate.ts).
    return await this.gate.hold(async () => {
      await left;
      if (kv && found) {
        slot.transcript = await kv.load(slot.sequence, found);
        slot.saved = slot.transcript !== undefined;
        // A conversation's saved state is its own user's: the one scope that made it.
        if (slot.transcript !== undefined) slot.scope = scope;
      }
      return await take();
    });
  }

  /**
   * Starts saving the conversation the sequence holds when a turn of another takes it (with saved
   * states on), at once: the store counts a save from when it is asked for, so that
   * conversation's own next turn, on another sequence, finds its file only once written. Saved
   * later (once this turn's prompt was fitted and its own file found), that next turn could look
   * first, load the turn before, and re-evaluate the last turn's tokens.
   */
  private leave(slot: Slot, key: string | undefined): Promise<void> {
    return slot.transcript?.key === key ? Promise.resolve() : this.saveState(slot);
  }

  /** Once this returns the sequence may change: the state is captured, its files are finished behind. */
  private async saveState(slot: Slot): Promise<void> {
    const { kv } = this;
    const { transcript } = slot;
    if (!kv || !transcript || slot.saved) return;
    const { written } = await this.gate.hold(() => kv.save(slot.sequence, transcript));
    slot.saved = true;
    // Not saved after all (a full disk): saved again if the sequence still holds it when asked.
    void written.then((ok) => {
      if (!ok && slot.transcript === transcript) slot.saved = false;
    });
  }

  /**
   * The fitted prompt's tokens, reusing the sequence's exact tokens when the prompt continues them:
   * a conversation's own turns, or for a stateless prompt whatever the sequence holds.
   */
  private promptTokens(slot: Slot, key: string | undefined, fitted: FittedPrompt, budget: number): Token[] {
    const { transcript } = slot;
    if (!transcript || (key !== undefined && transcript.key !== key)) return fitted.tokens;
    const continued = continueTranscript(transcript, fitted.text, this.prompts.tokenizer);
    // Generated tokens can spell a reply in more tokens than its text needs: the budget still rules.
    return continued && continued.length <= budget ? continued : fitted.tokens;
  }

  /**
   * How much of a stateless prompt a free sequence already holds, as llama-server's `cache_prompt`
   * chooses: less than half of the prompt scores 0, so a shared template opening does not take the
   * sequence of a long conversation from a least recently used one (see pool.ts). Another scope's
   * sequence scores 0: which sequence a prompt gets must not tell what another user sent either.
   */
  private prefixScore(slot: Slot, fitted: FittedPrompt, budget: number, scope: string): number {
    if (slot.scope !== scope) return 0;
    const tokens = this.promptTokens(slot, undefined, fitted, budget);
    const shared = slot.sequence.compareContextTokens(tokens).firstDifferentIndex;
    return shared * 2 >= tokens.length ? shared : 0;
  }

  /** What the sequence now holds, if the reply renders back as exactly its text. */
  private transcriptAfter(key: string, fitted: FittedPrompt, prompt: Token[], reply: Decoded["spelled"]): Transcript | undefined {
    const text = this.prompts.withReply(fitted.history, reply.text);
    return isReplyOf(fitted.text, text, reply.text) ? { key, text, tokens: [...prompt, ...reply.tokens] } : undefined;
  }

  /**
   * Prompt tokens allowed, leaving room for the reply. Reserving the whole `maxTokens` would
   * discard history for replies that are usually short, so at most a quarter of the context is
   * held back; a reply that outgrows the room left ends with finishReason "length".
   */
  private promptBudget(maxTokens: number): number {
    const size = this.context.contextSize;
    // One more for the token that must stay free at the end of the context.
    return size - 1 - Math.max(1, Math.min(maxTokens, Math.floor(size / 4)));
  }
}

function finishReason(stop: StopReason): FinishReason {
  switch (stop) {
    case "abort":
      return "cancelled";
    case "maxTokens":
      return "length";
    case "stop":
      return "stop";
  }
}

/** The KV cache is optional: one that cannot open (e.g. on a full disk) leaves the engine without it. */
async function openKvStore(
  cache: { dir: string; maxBytes: number },
  modelPath: string,
  llama: Llama,
  model: LlamaModel,
  context: LlamaContext,
  warn: (message: string, error: unknown) => void,
): Promise<KvStore | undefined> {
  try {
    return await KvStore.open({
      root: cache.dir,
      identity: await stateIdentity(modelPath, llama, context),
      maxBytes: cache.maxBytes,
      contextSize: context.contextSize,
      maxStateBytes: await stateSizeBound(model, context),
      warn,
    });
  } catch (error) {
    warn("saved KV states are off: their directory could not be opened", error);
    return undefined;
  }
}

/** What a saved state depends on: loading one made by another model can crash the process. */
async function stateIdentity(modelPath: string, llama: Llama, context: LlamaContext): Promise<string> {
  const file = await stat(modelPath);
  const { repo, release } = llama.llamaCppRelease;
  return [resolve(modelPath), file.size, file.mtimeMs, repo, release, context.kvCacheKeyType, context.kvCacheValueType].join("|");
}

/** Below this size a model's matrices are too small to split: thread hand-offs cost more than they save. */
const TINY_MODEL_BYTES = 32 * 1024 * 1024;

/**
 * llama.cpp's count of math cores (physical cores, no hyper-threads). A tiny model (the demo) runs
 * faster on one thread than on two, its matrices too small to split; real models gain from every core.
 */
function defaultThreads(llama: Llama, model: LlamaModel): number {
  return model.size < TINY_MODEL_BYTES ? 1 : Math.max(1, llama.cpuMathCores);
}

