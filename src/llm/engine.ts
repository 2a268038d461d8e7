/**
 * The inference engine: one model, one context split into `parallel` sequences, which its
 * scheduler owns (scheduler.ts). It knows nothing of HTTP or storage; callers hand it a
 * conversation and stream the reply. The engine chooses a sequence (pool.ts), fits the prompt
 * (prompt.ts) and says how much of what the sequence holds the prompt reuses: each sequence keeps
 * the exact tokens of the conversation it last served (see transcript.ts), so a follow-up turn
 * evaluates only its new tokens.
 */
import { stat } from "node:fs/promises";
import { basename, resolve } from "node:path";
import { type ChatWrapper, type Llama, type LlamaContext, type LlamaModel, LlamaText, SpecialTokensText, type Token } from "node-llama-cpp";
import { append } from "../append";
import { InvalidInput } from "../errors";
import { copiesStates, hasInfillSampler, hasLogprobs, isImagePosition, type TokenLogprobs, tokenBytes } from "../natives/addon";
import { loadProjector, seesImages, unloadProjector } from "../natives/vision";
import { bridge } from "./bridge";
import { type ChatStops, chatStops } from "./chat-stops";
import { resolveModelChatWrapper } from "./chat-wrapper";
import { type Decoded, decode, type StopReason } from "./decode";
import { DraftModel } from "./draft-model";
import { type HeldImages, hasImages, PromptImages, withoutImages } from "./images";
import { type FimTokens, fimTokensOf, type Infill, infillTokens } from "./infill";
import { KvStore, stateSizeBound } from "./kv-store";
import { type DeviceUse, deviceUse, type LoadOptions, loadLlamaModel, modelNameOf, overloadedOnGpu } from "./llama-load";
import { type Lease, type PoolStats, SequencePool } from "./pool";
import { type FittedPrompt, PromptRenderer, sharedPrefix, windowOpener } from "./prompt";
import { ReplyGrammars } from "./reply-grammar";
import { type PromptPlan, Scheduler, type Slot } from "./scheduler";
import type { StateMemory } from "./state-memory";
import { TemplateChat } from "./template-chat";
import { type ThoughtMarkers, thoughtMarkersOf } from "./thought-text";
import { ToolCallText } from "./tool-call-text";
import { callableFunctions } from "./tools";
import { continueTranscript, isReplyOf, type ShiftedPrompt, shiftTranscript, type Transcript } from "./transcript";
import {
  type ContextOverflow,
  type FinishReason,
  type FlashAttentionMode,
  type GenerateRequest,
  type GenerateResult,
  type KvType,
  kvCacheTypes,
  type Measured,
  type PromptEnds,
  promptEndsFor,
  type ReasoningMode,
  type ReplyPiece,
  type Sampling,
  type Speculate,
  type SpelledToken,
  samplingOf,
  type TokenLogprob,
  type ToolCall,
  type ToolFunction,
  type ToolRequest,
  type Turn,
  type TurnImage,
} from "./types";

export type { Infill, InfillFile } from "./infill";
export type * from "./types";
export { BudgetExceeded, replyRoom } from "./types";

export interface EngineOptions extends LoadOptions {
  /** Tokens per sequence. Default: the model's training context, capped at 4096. */
  contextSize?: number;
  /** Sequences, i.e. replies generated at once. Default 2. */
  parallel?: number;
  /** Requests allowed to wait for a free sequence before `overloaded`. Default 64. */
  queueMax?: number;
  /** Where to remember what is slow to work out about a model (its chat format). */
  cacheDir?: string;
  /** Where to keep conversations' KV states beyond their sequence, and how many bytes at most. */
  kvCache?: { dir: string; maxBytes: number; memory?: StateMemory };
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
  /** The KV cache's type (default f16); a quantized one needs flash attention. */
  kvType?: KvType;
  /** A conversation past the context: its dropped turns' cells shifted out (default), the window cut with slack, or evaluated afresh. */
  contextOverflow?: ContextOverflow;
  /** With `slack`, the share of the prompt's room a cut frees for the turns after it (default a half). */
  contextSlack?: number;
  /** Prompts' ends ready at once: one a batch, shortest first, or together; by default `auto`, for the device. */
  promptEnds?: PromptEnds;
  /** Speculative decoding of replies (default `auto`). */
  speculate?: Speculate;
  /** Tokens replies drafted, and of those the ones accepted, as they are verified. */
  onDrafts?: (drafted: number, accepted: number) => void;
  /** A smaller model of the same vocabulary whose guesses replies verify (`speculate` auto or draft). */
  draftModelPath?: string;
  /** The model's projector (an mmproj GGUF), through which it sees pictures: with Parley's compiled natives only. */
  projectorPath?: string;
  /**
   * The operator's turns every conversation starts with (a system prompt): evaluated into every
   * sequence at load, so a new conversation's first turn reuses them rather than evaluating them.
   */
  primedTurns?: Turn[];
}

const DEFAULT_CONTEXT_CAP = 4096;
/**
 * Tokens per sequence: the configured size, else the model's training context, capped because
 * every sequence's KV cache grows with it. One rule for the load and for the memory check made
 * before it, so that the check counts the context the load will take.
 */
export const contextSizeFor = (configured: number | undefined, trained: number | undefined): number =>
  configured ?? Math.min(trained ?? DEFAULT_CONTEXT_CAP, DEFAULT_CONTEXT_CAP);
const DEFAULT_BATCH_SIZE = 512;
/** A stateless prompt's transcript key: it belongs to no conversation (and is never saved). */
const NO_CONVERSATION = "";

/** How replies' thoughts are told apart, for a chat format that has them and unless they stay inline. */
interface Thoughts {
  markers: ThoughtMarkers;
  /** The close marker as the chat format writes it (its whitespace too): what ends a thought at its budget. */
  close: readonly Token[];
  /** Told apart, then left out of what the engine yields and returns. */
  hidden: boolean;
}

/** A prompt fitted to the context, and the opening any user's prompt with the same operator turns shares. */
interface Fitting {
  fitted: FittedPrompt;
  opening: readonly Token[];
}

export class Engine {
  private disposed = false;
  /** The special tokens that open a call, with their text: the reply's text shows them, so that calls are found. */
  private readonly callOpeners: ReadonlyMap<Token, string>;
  /** The tokens that are a call's whole opener (special or not): a reply that may call nothing never writes one. */
  private readonly openerTokens: readonly Token[];
  /** Each token's text and bytes, as a token's log-probability shows it: asked of the natives once per token. */
  private readonly spellings = new Map<Token, { token: string; bytes: number[] }>();
  private readonly grammars: ReplyGrammars;
  /** Unix seconds: OpenAI's model listing shows when a model was "created". */
  readonly loadedAt = Math.floor(Date.now() / 1000);
  /**
   * What a conversation past the context does: `shift` only where the model's cache allows it (a
   * recurrent model's state, or a sliding window's missing cells, cannot be shifted).
   */
  private readonly overflow: ContextOverflow;
  /** The share of the prompt's room a conversation's window is fitted into once it overflows. */
  private readonly keep: number;
  /** The tokens an infill's prompt is framed with; none for a model not trained to fill in the middle. */
  private readonly fim: FimTokens | undefined;

  private constructor(
    private readonly llama: Llama,
    private readonly model: LlamaModel,
    private readonly context: LlamaContext,
    private readonly pool: SequencePool<Slot>,
    private readonly scheduler: Scheduler,
    private readonly prompts: PromptRenderer,
    private readonly stops: ChatStops,
    private readonly thoughts: Thoughts | undefined,
    readonly modelName: string,
    /** Where the native binaries came from: the local build's directory, "embedded" in the executable, or "prebuilt". */
    readonly natives: string,
    readonly device: DeviceUse,
    overflow: ContextOverflow,
    slack: number,
    /** How the model sees pictures, or why it does not. */
    private readonly vision: PromptImages | string,
    /** Prompt tokens evaluated at once (`PARLEY_BATCH_SIZE`): an infill's texts are cut to shares of it, as llama-server's to its batch. */
    private readonly promptChunk: number,
  ) {
    this.fim = fimTokensOf(model);
    this.callOpeners = specialTokensOf(model, prompts.toolSyntax.openers);
    this.openerTokens = prompts.toolSyntax.openers.flatMap((text) => {
      const tokens = model.tokenize(text, true);
      return tokens.length === 1 ? tokens : [];
    });
    const shifts = !model.fileInsights.isRecurrent && model.fileInsights.swaSize === undefined;
    this.overflow = overflow === "shift" && !shifts ? "exact" : overflow;
    this.keep = this.overflow === "slack" ? 1 - slack : 1;
    this.grammars = new ReplyGrammars(llama, model, prompts.toolSyntax, thoughts?.markers);
  }

  static async load(options: EngineOptions): Promise<Engine> {
    const { modelPath, parallel = 2, queueMax = 64 } = options;
    const { llama, model, threads, natives } = await loadLlamaModel(options);
    const warn = options.onWarning ?? (() => {});
    let created: LlamaContext | undefined;
    try {
      const promptChunk = options.batchSize ?? DEFAULT_BATCH_SIZE;
      const context = await model
        .createContext({
          contextSize: contextSizeFor(options.contextSize, model.trainContextSize),
          sequences: parallel,
          threads,
          // A batch holds prompt chunks or every sequence's next token (scheduler.ts); the sum is
          // the room a batch mixing both had, kept so llama.cpp's batch size did not change.
          batchSize: promptChunk + parallel,
          // "auto" is on: in `bun run bench attention` on bench-small, decode was never slower with it
          // and faster after a short prompt (llama-server's default too); see docs/performance.md.
          flashAttention: options.flashAttention !== "off",
          ...kvCacheTypes(options.kvType),
        })
        .catch(overloadedOnGpu(modelPath));
      created = context;
      const chatWrapper = resolveModelChatWrapper(model, options.cacheDir);
      const vision = await visionOf(options, context, threads, warn);
      const reasoning = options.reasoning ?? "separate";
      const markers = reasoning === "inline" ? undefined : thoughtMarkersOf(chatWrapper);
      const kv = options.kvCache && options.kvCache.maxBytes > 0 ? await openKvStore(options.kvCache, modelPath, llama, model, context, warn) : undefined;
      const sequences = Array.from({ length: parallel }, () => context.getSequence());
      const drafter = await loadDrafter(options, natives, llama, model, { contextSize: context.contextSize, sequences: parallel, threads }, warn);
      const scheduler = new Scheduler(context, sequences, {
        promptChunk,
        kv,
        promptEnds: promptEndsFor(options.promptEnds ?? "auto", model.gpuLayers, model.fileInsights.totalLayers - 1),
        ...(options.speculate ? { speculate: options.speculate } : {}),
        ...(options.onDrafts ? { onDrafts: options.onDrafts } : {}),
        ...(drafter ? { drafter } : {}),
      });
      const engine = new Engine(
        llama,
        model,
        context,
        new SequencePool(scheduler.slots, queueMax),
        scheduler,
        new PromptRenderer(model, chatWrapper, TemplateChat.of(model), typeof vision === "string" ? undefined : vision),
        chatStops(model, chatWrapper),
        markers && { markers, close: thoughtCloseOf(model, chatWrapper), hidden: reasoning === "hide" },
        modelNameOf(options, model),
        natives,
        await deviceUse(llama, model),
        options.contextOverflow ?? "shift",
        options.contextSlack ?? 0.5,
        vision,
        promptChunk,
      );
      await engine.warmUp();
      // Only speed is at stake: a prompt that cannot be primed is evaluated by each first turn.
      await engine.prime(options.primedTurns ?? []).catch((error: unknown) => options.onWarning?.("the system prompt could not be evaluated ahead", error));
      return engine;
    } catch (err) {
      // The natives' projector outlives its context unless unloaded first.
      if (created) await unloadProjector(created);
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
    await this.scheduler.clear();
  }

  /**
   * Evaluates `turns` into every sequence, in the opening scope: any user's prompt that starts with
   * them reuses them, and nothing else of the sequences (see `GenerateRequest.cacheScope`). One
   * stateless one-token reply a sequence, all at once, so they share batches.
   */
  private async prime(turns: Turn[]): Promise<void> {
    if (turns.length === 0) return;
    await Promise.all(
      this.scheduler.slots.map(async () => {
        const reply = this.generate({
          cacheScope: "",
          publicTurns: turns.length,
          history: [...turns, { role: "user", content: "" }],
          temperature: 0,
          maxTokens: 1,
        });
        while (!(await reply.next()).done);
      }),
    );
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

  /** Whether it fills in the middle: its file names FIM tokens (`infill.ts`). */
  get infills(): boolean {
    return this.fim !== undefined;
  }

  /** Token ids go from 0 to one below this. */
  private get vocabularySize(): number {
    return this.model.fileInfo.metadata.tokenizer.ggml.tokens.length;
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

  /** Whether its replies' thoughts are told apart from their answers (a thought's budget can be held). */
  get thinks(): boolean {
    return this.thoughts !== undefined;
  }

  /** Whether the model sees the pictures in turns. */
  get seesImages(): boolean {
    return typeof this.vision !== "string";
  }

  /** The request's pictures, held until its prompt is evaluated; a model that sees none refuses the first. */
  private async holdImages({ history, cacheScope }: Pick<GenerateRequest, "history" | "cacheScope">): Promise<HeldImages> {
    if (typeof this.vision !== "string") return await this.vision.hold(history, cacheScope);
    if (hasImages(history)) throw new InvalidInput({ part: "image", index: 0 }, this.vision);
    return withoutImages(history);
  }

  /** Lays the pictures out (a model that sees none refuses the first), so that a prompt with them finds them laid out. */
  private async layOut(images: readonly TurnImage[], cacheScope: string): Promise<void> {
    (await this.holdImages({ history: [{ role: "user", content: "", images: images.map(({ data }) => ({ data, at: 0 })) }], cacheScope })).release();
  }

  /**
   * Whether the model can be shown each picture: laid out now (decoded by the projector), so the
   * prompt that follows finds them laid out. A model that sees none can be shown none.
   */
  async seeable(images: readonly TurnImage[], cacheScope: string): Promise<boolean[]> {
    if (!this.seesImages) return images.map(() => false);
    const seen: boolean[] = [];
    for (const image of images) {
      try {
        await this.layOut([image], cacheScope);
        seen.push(true);
      } catch (error) {
        if (!(error instanceof InvalidInput)) throw error;
        seen.push(false);
      }
    }
    return seen;
  }

  /**
   * Refuses what a request asks that the model cannot give, before any reply starts:
   * `InvalidInput` naming the log-probabilities or the infill sampler (natives without them), a token bias (a token the
   * model does not have), the reply format or a tool's parameters (a schema keyword the grammar
   * cannot enforce), the tool choice (a function not offered), a thought's budget (no thoughts),
   * the tools (more prompt tokens than the context leaves), a picture the request sends (`images`:
   * a model that sees none, or one its projector cannot decode; laid out now for the prompt).
   */
  async check(
    request: Pick<
      GenerateRequest,
      "logitBias" | "format" | "tools" | "logprobs" | "thoughtTokens" | "maxTokens" | "contextTokens" | "cacheScope" | "infill" | "infillSampler"
    > & {
      images?: readonly TurnImage[];
    },
  ): Promise<void> {
    if (request.infill && !this.fim) {
      throw new InvalidInput(
        { part: "infill" },
        `${this.modelName} does not fill in the middle: its file names no FIM prefix, suffix and middle tokens (a code model's, as Qwen2.5-Coder's, does)`,
      );
    }
    // None (0) is what a model without thoughts gives anyway.
    if (request.thoughtTokens !== undefined && request.thoughtTokens > 0 && !this.thoughts) {
      throw new InvalidInput(
        { part: "thoughtBudget" },
        `${this.modelName} has no thoughts told apart from its answer (its chat format has none, or PARLEY_REASONING is inline): a thought's budget cannot be held`,
      );
    }
    if (request.infillSampler && !hasInfillSampler(this.context)) {
      throw new InvalidInput({ part: "sampler" }, "the infill sampler needs Parley's compiled natives (bun run natives), which this build runs without");
    }
    if (request.logprobs !== undefined && !hasLogprobs(this.context)) {
      throw new InvalidInput({ part: "logprobs" }, "log-probabilities need Parley's compiled natives (bun run natives), which this build runs without");
    }
    const outside = Object.keys(request.logitBias ?? {}).find((token) => Number(token) >= this.vocabularySize);
    if (outside !== undefined)
      throw new InvalidInput({ part: "tokenBias" }, `token ${outside} is not one of the model's: its token ids go from 0 to ${this.vocabularySize - 1}`);
    await this.grammars.check(request);
    if (request.images?.length) await this.layOut(request.images, request.cacheScope);
    // Tools are shown whole: ones that alone outgrow the prompt's room are refused before anything
    // starts. Beside an empty question: some templates (Llama 3's) put the tools in the first one.
    // So is a request's own context too small for the chat template's frame around an empty question.
    const smaller = request.contextTokens !== undefined && request.contextTokens < this.context.contextSize;
    if (!request.tools && !smaller) return;
    const budget = this.promptBudget(request);
    const empty = await this.prompts.fit([{ role: "user", content: "" }], budget, request.cacheScope, request.tools?.functions);
    if (empty.tokens.length > budget) {
      throw new InvalidInput(
        { part: "context" },
        `a context of ${request.contextTokens} tokens leaves ${budget} for a prompt beside the reply's room, fewer than the chat template alone takes (${empty.tokens.length})`,
      );
    }
  }

  /** What splits the reply's calls from its text; a call streams while a grammar holds the reply (a forced call, or an armed lazy one). */
  private callText(tools: ToolRequest, sampling: Sampling): ToolCallText {
    const names = new Set(callableFunctions(tools).map((fn) => fn.name));
    const { grammar, lazyGrammar } = sampling;
    return new ToolCallText(this.prompts.toolSyntax, names, () => grammar !== undefined || lazyGrammar?.armed === true);
  }

  /** A token's log-probabilities as a client is shown them. */
  private readonly spell = (token: Token, { logprob, top }: TokenLogprobs): TokenLogprob => ({
    ...this.spelling(token),
    logprob,
    top: top.map((other): SpelledToken => ({ ...this.spelling(other.token), logprob: other.logprob })),
  });

  private spelling(token: Token): { token: string; bytes: number[] } {
    let spelled = this.spellings.get(token);
    if (spelled === undefined) {
      const bytes = tokenBytes(this.context, token);
      spelled = { token: new TextDecoder().decode(bytes), bytes: [...bytes] };
      this.spellings.set(token, spelled);
    }
    return spelled;
  }

  /**
   * `sampling`, with the call opener's token banned when the request offers no tool to call (none,
   * or a choice of none): what a model says then is never a call, even with a client's bias on it.
   */
  private callable(request: Pick<GenerateRequest, "tools">, sampling: Sampling): Sampling {
    if (request.tools || this.openerTokens.length === 0) return sampling;
    const logitBias = new Map(sampling.logitBias);
    for (const token of this.openerTokens) logitBias.set(token, Number.NEGATIVE_INFINITY);
    return { ...sampling, logitBias };
  }

  /**
   * The request's prompt, as fitted to the context for a sequence that holds none of it, and its
   * tokens counted. A sequence holding the conversation past its context may evaluate another
   * window (shifted, or resumed with slack): a `budget` from this count is still enforced on the
   * prompt evaluated. Handed back as the same request's `measured`, `generate` fits nothing again.
   */
  async measure(
    request: Pick<GenerateRequest, "history" | "raw" | "infill" | "maxTokens" | "contextTokens" | "cacheScope" | "tools" | "conversationKey">,
  ): Promise<Measured> {
    if (request.raw !== undefined) return counted((await this.prompts.raw(request.raw, this.promptBudget(request), request.cacheScope)).tokens.length);
    if (request.infill) return counted(this.infillPrompt(request.infill, request, request.cacheScope).tokens.length);
    const keep = request.conversationKey === undefined ? 1 : this.keep;
    const budget = this.promptBudget(request);
    const pictures = await this.holdImages(request);
    try {
      const fitted = seen(await this.prompts.fit(pictures.turns, budget, request.cacheScope, request.tools?.functions ?? [], keep), pictures);
      const { history, cacheScope, tools, conversationKey } = request;
      return new MeasuredPrompt(this, fitted, pictures, { history, cacheScope, tools, conversationKey, budget });
    } catch (error) {
      pictures.release();
      throw error;
    }
  }

  /** The request's `measured`, where `measure` fitted it on this engine from the same inputs. */
  private measuredFor(request: GenerateRequest, budget: number): MeasuredPrompt | undefined {
    const { measured } = request;
    if (!(measured instanceof MeasuredPrompt) || measured.engine !== this) return undefined;
    const { inputs } = measured;
    const same =
      inputs.history === request.history &&
      inputs.budget === budget &&
      inputs.cacheScope === request.cacheScope &&
      inputs.tools === request.tools &&
      inputs.conversationKey === request.conversationKey;
    return same ? measured : undefined;
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
    const budget = this.promptBudget(request);
    // A stateless prompt, or a new conversation's, is fitted before a sequence is chosen: its tokens choose it.
    const tools = request.tools?.functions ?? [];
    const byPrompt = key === undefined || request.startsConversation === true;
    const { raw, infill } = request;
    // Either is a prompt as written, whose reply is text as the model continues it.
    const plain = raw !== undefined || infill !== undefined;
    if (plain && (request.history.length > 0 || key !== undefined || request.tools || request.format)) {
      throw new Error("a raw or infill prompt has no history, conversation, tools or format");
    }
    const prior = this.measuredFor(request, budget);
    // Without pictures, nothing to wait for: a conversation's turn takes its sequence synchronously.
    const pictures = prior?.pictures ?? (hasImages(request.history) ? await this.holdImages(request) : withoutImages(request.history));
    // Also stops generation when the consumer quits early (`return()`), so the sequence comes back.
    const stop = new AbortController();
    let running: Promise<Decoded> | undefined;
    let lease: Lease<Slot> | undefined;
    try {
      const history = pictures.turns;
      const statelessPrompt =
        raw !== undefined
          ? await this.prompts.raw(raw, budget, scope)
          : infill
            ? this.infillPrompt(infill, request, scope)
            : byPrompt
              ? (prior?.fitted ?? seen(await this.prompts.fit(history, budget, scope, tools, key === undefined ? 1 : this.keep), pictures))
              : undefined;
      const score = (slot: Slot) => this.prefixScore(slot, statelessPrompt!, budget, scope);
      lease = await this.pool.acquire(key === undefined ? score : byPrompt ? { key, score } : key, request.signal);
      const slot = lease.item;
      const { release } = lease;
      const sampling = await this.grammars.hold(request, this.callable(request, samplingOf(request, this.context.contextSize)));
      // Fitted while the scheduler saves what the sequence held and finds this conversation's state.
      const fitting = (async (): Promise<Fitting> => ({
        fitted: statelessPrompt ?? prior?.fitted ?? seen(await this.prompts.fit(history, budget, scope, tools, this.keep), pictures),
        // Without the tools: a client chooses them, so another user's prompt must not find them cached.
        opening: await this.prompts.opening(history.slice(0, request.publicTurns ?? 0)),
      }))();
      let fit: Fitting | undefined;
      const signal = request.signal ? AbortSignal.any([request.signal, stop.signal]) : stop.signal;
      const said = { content: "", reasoning: "" };
      const calls: ToolCall[] = [];
      const logprobs: TokenLogprob[] = [];
      const callText = request.tools && this.callText(request.tools, sampling);

      const decoded = yield* bridge<ReplyPiece, Decoded>((emit) => {
        running = decode(
          this.scheduler,
          {
            slot,
            ...(key !== undefined ? { key } : {}),
            scope,
            prompt: fitting.then((fitted) => {
              fit = fitted;
              return (held: Slot) => {
                const planned = this.plan(held, key, scope, fitted, budget, history);
                fit = { ...fitted, fitted: planned.fitted };
                return pictures.images.size > 0 ? { ...planned.plan, images: pictures.images } : planned.plan;
              };
            }),
            sampling,
            signal,
            maxTokens: request.maxTokens,
            ...(request.budget !== undefined ? { budget: request.budget } : {}),
            ...(request.logprobs !== undefined ? { logprobs: request.logprobs } : {}),
          },
          {
            endsReply: this.stops.endsReply,
            // A raw prompt's reply is text as the model continues it: no chat format's stop texts or thoughts.
            stopStrings: [...(plain ? [] : this.stops.texts), ...(request.stop ?? [])],
            ...(request.stopWhen ? { stopWhen: request.stopWhen } : {}),
            thought: plain ? undefined : this.thoughts?.markers,
            ...(callText ? { calls: callText, shown: this.callOpeners } : {}),
            ...(sampling.lazyGrammar ? { lazyGrammar: sampling.lazyGrammar } : {}),
            ...(request.logprobs !== undefined ? { spell: this.spell } : {}),
            ...(request.thoughtTokens !== undefined && this.thoughts ? { thoughtBudget: { tokens: request.thoughtTokens, close: this.thoughts.close } } : {}),
          },
          (piece) => {
            if (piece.kind === "toolCall") {
              if (piece.part.part === "close") calls.push(piece.part.call);
            } else if (piece.kind === "logprobs") append(logprobs, piece.entries);
            else if (piece.kind === "reasoning" && this.thoughts?.hidden) return;
            else if (piece.kind !== "prompt") said[piece.kind] += piece.text;
            emit(piece);
          },
        );
        // The sequence is free once evaluation ends, even while the consumer still reads buffered pieces.
        void running.then((result) => {
          if (result.prompt && fit) slot.transcript = this.transcriptAfter(key ?? NO_CONVERSATION, fit.fitted, result.prompt.tokens, result.spelled);
          release();
        }, release);
        return running;
      });

      const model = this.model;
      const tokens = decoded.prompt?.tokens ?? [];
      return {
        text: said.content,
        ...(said.reasoning !== "" ? { reasoning: said.reasoning } : {}),
        finishReason: finishReason(decoded.stopReason),
        ...(decoded.stopString !== undefined && request.stop?.includes(decoded.stopString) ? { stopSequence: decoded.stopString } : {}),
        promptTokens: tokens.length,
        cachedTokens: decoded.prompt?.cachedTokens ?? 0,
        completionTokens: decoded.tokens.length,
        reasoningTokens: decoded.reasoningTokens,
        ...(calls.length > 0 ? { toolCalls: calls } : {}),
        ...(request.logprobs !== undefined ? { logprobs } : {}),
        // Rendered on demand: detokenizing the whole history on every turn would be work no caller needs.
        get prompt() {
          return model.detokenize(
            tokens.filter((token) => !isImagePosition(token)),
            true,
          );
        },
      };
    } finally {
      stop.abort();
      await running?.catch(() => undefined);
      lease?.release();
      pictures.release();
    }
  }

  /**
   * Drops what the engine keeps of a conversation: the transcript of an idle sequence that holds
   * it (so it is neither reused nor saved again) and its saved KV state. For a deleted
   * conversation; call when none of its replies is running.
   */
  async forget(conversationKey: string): Promise<void> {
    await this.scheduler.forget(conversationKey);
  }

  /**
   * Releases the model and native memory, saving live conversations' KV states first so they stay
   * warm across a restart. Waiting requests fail; call after in-flight ones end.
   */
  async close(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    this.pool.close(new Error("Engine is disposed"));
    await this.scheduler.saveAll();
    await unloadProjector(this.context);
    await this.context.dispose();
    await this.model.dispose();
    await this.llama.dispose();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /**
   * The prompt, given what the sequence holds once readied, and the window it holds. A prompt
   * reuses what the sequence holds only when that was made in its own scope; otherwise no more of
   * it than the prompt's `opening`, the part any user's prompt shares. A conversation's prompt
   * that does not continue what the sequence holds has overflowed: it is shifted, or with slack
   * kept at the window the sequence holds while that still fits.
   */
  private plan(
    slot: Slot,
    key: string | undefined,
    scope: string,
    { fitted, opening }: Fitting,
    budget: number,
    history: readonly Turn[],
  ): { plan: PromptPlan; fitted: FittedPrompt } {
    if (slot.scope !== scope) return { plan: { tokens: fitted.tokens, reusable: sharedPrefix(fitted.tokens, opening) }, fitted };
    const tokens = this.promptTokens(slot, key, fitted, budget, scope);
    const overflowed = tokens === fitted.tokens && key !== undefined;
    const shifted = overflowed && this.overflow === "shift" ? this.shifted(slot, key, fitted, budget, scope) : undefined;
    if (shifted) return { plan: { tokens: shifted.tokens, reusable: Infinity, drop: shifted.drop }, fitted };
    const resumed = overflowed && this.overflow === "slack" ? this.resumed(slot, key, history, fitted.tools, budget, scope) : undefined;
    if (resumed) return { plan: { tokens: resumed.tokens, reusable: Infinity }, fitted: resumed };
    return { plan: { tokens, reusable: Infinity }, fitted };
  }

  /**
   * A conversation cut with slack: its window from where the sequence's window starts, continuing
   * what the sequence holds, while that fits. Undefined once it no longer fits: then cut again.
   */
  private resumed(slot: Slot, key: string, history: readonly Turn[], tools: readonly ToolFunction[], budget: number, scope: string): FittedPrompt | undefined {
    const { transcript } = slot;
    if (transcript?.key !== key || transcript.opens === undefined) return undefined;
    for (const window of this.prompts.windowsFrom(history, tools, transcript.opens)) {
      const tokens = continueTranscript(transcript, window.text, this.prompts.tokenizerFor(scope));
      if (tokens) return tokens.length <= budget ? { ...window, tokens } : undefined;
    }
    return undefined;
  }

  /** The prompt of a conversation whose oldest turns the window dropped, reusing the rest as the sequence holds it. */
  private shifted(slot: Slot, key: string, fitted: FittedPrompt, budget: number, scope: string): ShiftedPrompt | undefined {
    const { transcript } = slot;
    // A shift finds turns by their special tokens; an image's positions are none of the vocabulary's.
    if (transcript?.key !== key || transcript.tokens.some(isImagePosition)) return undefined;
    const shifted = shiftTranscript(transcript, fitted.text, this.prompts.tokenizerFor(scope));
    return shifted && shifted.tokens.length <= budget ? shifted : undefined;
  }

  /**
   * The fitted prompt's tokens, reusing the sequence's exact tokens when the prompt continues them:
   * a conversation's own turns, or for a stateless prompt whatever the sequence holds.
   */
  private promptTokens(slot: Slot, key: string | undefined, fitted: FittedPrompt, budget: number, scope: string): Token[] {
    const { transcript } = slot;
    if (!transcript || fitted.assembled || (key !== undefined && transcript.key !== key)) return fitted.tokens;
    const continued = continueTranscript(transcript, fitted.text, this.prompts.tokenizerFor(scope));
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
    const tokens = this.promptTokens(slot, undefined, fitted, budget, scope);
    const shared = slot.sequence.compareContextTokens(tokens).firstDifferentIndex;
    return shared * 2 >= tokens.length ? shared : 0;
  }

  /** What the sequence now holds, if the reply renders back as exactly its text. */
  private transcriptAfter(key: string, fitted: FittedPrompt, prompt: readonly Token[], reply: Decoded["spelled"]): Transcript | undefined {
    if (fitted.assembled) return undefined;
    const text = this.prompts.withReply(fitted, reply.text);
    const opens = windowOpener(fitted.turns);
    return isReplyOf(fitted.text, text, reply.text) ? { key, text, tokens: [...prompt, ...reply.tokens], ...(opens ? { opens } : {}) } : undefined;
  }

  /**
   * An infill's prompt (`infill.ts`), fitted to the request's context. Assembled from its texts'
   * tokens, so its text only renders them: no later prompt continues it by its text.
   */
  private infillPrompt(infill: Infill, request: Pick<GenerateRequest, "maxTokens" | "contextTokens">, scope: string): FittedPrompt {
    if (!this.fim) throw new Error("a model without FIM tokens was given an infill (Engine.check refuses it)");
    const room = {
      batch: this.promptChunk,
      context: Math.min(request.contextTokens ?? Infinity, this.context.contextSize),
      budget: this.promptBudget(request),
    };
    const tokens = infillTokens(infill, this.fim, this.prompts.tokenizerFor(scope), room);
    return { turns: [], tools: [], text: LlamaText(new SpecialTokensText(this.model.detokenize(tokens, true))), tokens, raw: true, assembled: true };
  }

  /**
   * Prompt tokens allowed in the context (the request's own, where smaller), leaving room for the
   * reply. Reserving the whole `maxTokens` would discard history for replies that are usually
   * short, so at most a quarter of the context is held back; a reply that outgrows the room left
   * ends with finishReason "length".
   */
  private promptBudget({ maxTokens, contextTokens }: Pick<GenerateRequest, "maxTokens" | "contextTokens">): number {
    const size = Math.min(contextTokens ?? Number.POSITIVE_INFINITY, this.context.contextSize);
    // One more for the token that must stay free at the end of the context.
    return size - 1 - Math.max(1, Math.min(maxTokens, Math.floor(size / 4)));
  }
}

function finishReason(stop: StopReason): FinishReason {
  switch (stop) {
    case "abort":
      return "cancelled";
    case "maxTokens":
    case "lines":
      return "length";
    case "stop":
      return "stop";
  }
}

/** The tokens of the chat format's thought close marker, with the whitespace it writes around it. */
function thoughtCloseOf(model: LlamaModel, chatWrapper: ChatWrapper): Token[] {
  return LlamaText(chatWrapper.settings.segments!.thought!.suffix!).tokenize(model.tokenizer);
}

/** Those of `texts` that are one special token of the model, which detokenizes to nothing as text. */
function specialTokensOf(model: LlamaModel, texts: readonly string[]): ReadonlyMap<Token, string> {
  const special = new Map<Token, string>();
  for (const text of texts) {
    const tokens = model.tokenize(text, true);
    if (tokens.length === 1 && model.detokenize(tokens, false) === "") special.set(tokens[0]!, text);
  }
  return special;
}

/**
 * The draft model, where one is configured: with `auto` a draft model that cannot draft for this
 * model (another vocabulary) leaves replies drafting from their own tokens, with a warning; with
 * `draft` it fails the load.
 */
async function loadDrafter(
  { draftModelPath, speculate = "auto" }: EngineOptions,
  natives: string,
  llama: Llama,
  model: LlamaModel,
  shape: { contextSize: number; sequences: number; threads: number },
  warn: (message: string, error: unknown) => void,
): Promise<DraftModel | undefined> {
  if (draftModelPath === undefined || speculate === "off" || speculate === "lookup") return undefined;
  // The prebuilt decodes one step a call: a draft model would load and never be asked.
  if (natives === "prebuilt") {
    warn(
      `the draft model ${basename(draftModelPath)} is not loaded`,
      new Error("speculation needs Parley's compiled natives (`bun run natives`), which this build runs without"),
    );
    return undefined;
  }
  try {
    return await DraftModel.load(llama, draftModelPath, model, shape);
  } catch (error) {
    if (speculate === "draft") throw error;
    warn("replies draft from their own tokens: the draft model cannot draft for this model", error);
    return undefined;
  }
}

/** The KV cache is optional: one that cannot open (e.g. on a full disk) leaves the engine without it. */
async function openKvStore(
  cache: NonNullable<EngineOptions["kvCache"]>,
  modelPath: string,
  llama: Llama,
  model: LlamaModel,
  context: LlamaContext,
  warn: (message: string, error: unknown) => void,
): Promise<KvStore | undefined> {
  const memory = cache.memory && copiesStates(context) ? cache.memory : undefined;
  if (cache.memory && !memory) {
    warn(
      "saved KV states go to disk only: keeping them in memory (PARLEY_KV_RAM_MB) needs Parley's compiled natives",
      new Error("these natives cannot copy a sequence's state"),
    );
  }
  try {
    return await KvStore.open({
      root: cache.dir,
      ...(memory ? { memory } : {}),
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

/**
 * The model's projector loaded, or why the model sees no pictures: it has none, or these natives
 * take none (a warning then: the operator named one).
 */
async function visionOf(
  { projectorPath, modelPath }: EngineOptions,
  context: LlamaContext,
  threads: number,
  warn: (message: string, error: unknown) => void,
): Promise<PromptImages | string> {
  if (projectorPath === undefined) {
    return `${basename(modelPath)} sees no pictures: it has no projector (an mmproj-*.gguf beside it in the models directory, or PARLEY_MODEL=model.gguf+projector.gguf)`;
  }
  if (!seesImages(context)) {
    const why = "pictures need Parley's compiled natives, which this build runs without: `bun run natives` from a checkout, or the single executable";
    warn(`the projector ${basename(projectorPath)} is not loaded`, new Error(why));
    return why;
  }
  await loadProjector(context, projectorPath, threads);
  return new PromptImages(context);
}

/** A count with nothing to take over: a raw or infill prompt is only tokenized. */
const counted = (tokens: number): Measured => ({ tokens, release: () => {} });

/** What `measure` fitted, and from what: `generate` takes it only for the same inputs. */
class MeasuredPrompt implements Measured {
  constructor(
    readonly engine: Engine,
    readonly fitted: FittedPrompt,
    readonly pictures: HeldImages,
    readonly inputs: Pick<GenerateRequest, "history" | "cacheScope" | "tools" | "conversationKey"> & { budget: number },
  ) {}

  get tokens(): number {
    return this.fitted.tokens.length;
  }

  release(): void {
    this.pictures.release();
  }
}

/** The fitted prompt, if it has every picture of the newest turn: fitting cuts the newest turn's start when it must, and a picture is not to be cut. */
function seen(fitted: FittedPrompt, pictures: HeldImages): FittedPrompt {
  const cut = pictures.newest.find(({ placeholder }) => !fitted.tokens.includes(placeholder));
  if (cut) {
    throw new InvalidInput(
      { part: "image", index: cut.index },
      `picture ${cut.index + 1} does not fit the context with the rest of its message: the prompt may take ${fitted.tokens.length} tokens at most`,
    );
  }
  return fitted;
}
