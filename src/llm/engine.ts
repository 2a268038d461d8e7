/**
 * The inference engine: one model, one context split into `parallel` sequences, each wrapped
 * once in a LlamaChat and reused for the engine's whole life. It knows nothing of HTTP or
 * storage; callers hand it a conversation and stream the reply.
 */
import { basename } from "node:path";
import {
  getLlama,
  LlamaChat,
  resolveChatWrapper,
  type Llama,
  type LlamaChatResponse,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaModel,
} from "node-llama-cpp";
import { bridge } from "./bridge";
import { SequencePool } from "./pool";
import { PromptRenderer } from "./prompt";
import type { EngineStats, FinishReason, GenerateRequest, GenerateResult } from "./types";

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
}

const DEFAULT_CONTEXT_CAP = 4096;

interface Slot {
  sequence: LlamaContextSequence;
  chat: LlamaChat;
}

export class Engine {
  private disposed = false;

  private constructor(
    private readonly llama: Llama,
    private readonly model: LlamaModel,
    private readonly context: LlamaContext,
    private readonly slots: readonly Slot[],
    private readonly pool: SequencePool<Slot>,
    private readonly prompts: PromptRenderer,
    readonly modelName: string,
  ) {}

  static async load(options: EngineOptions): Promise<Engine> {
    const { modelPath, parallel = 2, gpu = false, queueMax = 64 } = options;
    const llama = await getLlama({ gpu: gpu ? "auto" : false, build: gpu ? "auto" : "never" });
    try {
      const model = await llama.loadModel({ modelPath, gpuLayers: gpu ? "auto" : 0 });
      const threads = options.threads ?? defaultThreads(llama, model);
      llama.maxThreads = threads;
      const context = await model.createContext({
        contextSize: options.contextSize ?? Math.min(model.trainContextSize, DEFAULT_CONTEXT_CAP),
        sequences: parallel,
        threads,
      });
      // Resolving the wrapper parses and trial-renders the Jinja template (0.2-0.4 s of blocking
      // JS measured here, even for plain ChatML), so it happens once and every LlamaChat shares it.
      const chatWrapper = resolveChatWrapper(model);
      const slots = Array.from({ length: parallel }, (): Slot => {
        const sequence = context.getSequence();
        return { sequence, chat: new LlamaChat({ contextSequence: sequence, chatWrapper, autoDisposeSequence: false }) };
      });
      const name = model.fileInfo.metadata.general?.name;
      return new Engine(
        llama,
        model,
        context,
        slots,
        new SequencePool(slots, queueMax),
        new PromptRenderer(model, chatWrapper),
        typeof name === "string" && name.trim() !== "" ? name : basename(modelPath).replace(/\.gguf$/i, ""),
      );
    } catch (err) {
      await llama.dispose();
      throw err;
    }
  }

  /** Tokens per sequence, as created (llama.cpp may round the request up). */
  get contextSize(): number {
    return this.context.contextSize;
  }

  /** CPU threads inference runs on. */
  get threads(): number {
    return this.llama.maxThreads;
  }

  stats(): EngineStats {
    return this.pool.stats();
  }

  /**
   * Waits for a free sequence, then yields the reply's text pieces as they are generated.
   * An abort while queued throws an `AbortError`; an abort (or `return()`) during generation
   * stops within a token or so and returns the partial reply as `cancelled`.
   */
  async *generate(request: GenerateRequest): AsyncGenerator<string, GenerateResult, void> {
    if (this.disposed) throw new Error("Engine is disposed");
    const lease = await this.pool.acquire(request.conversationKey, request.signal);
    // Also stops generation when the consumer quits early (`return()`), so the sequence comes back.
    const stop = new AbortController();
    let running: Promise<LlamaChatResponse | undefined> | undefined;
    try {
      const { sequence, chat } = lease.item;
      const prompt = this.prompts.fit(request.history, this.promptBudget(request.maxTokens));
      // LlamaChat keeps the longest common prefix (minus one token it must re-evaluate for logits).
      const cachedTokens = Math.min(
        sequence.compareContextTokens(prompt.tokens).firstDifferentIndex,
        prompt.tokens.length - 1,
      );
      const signal = request.signal ? AbortSignal.any([request.signal, stop.signal]) : stop.signal;
      let completionTokens = 0;
      const pieces: string[] = [];

      const response = yield* bridge<string, LlamaChatResponse | undefined>((emit) => {
        running = chat
          .generateResponse(prompt.history, {
            // Capped to the room left in the context: LlamaChat would otherwise shift the context
            // mid-reply, which can fail outright and would make `prompt` and the token counts stale.
            // (At least 1: LlamaChat reads 0 as "no limit".)
            maxTokens: Math.max(1, Math.min(request.maxTokens, this.contextSize - prompt.tokens.length - 1)),
            temperature: request.temperature,
            seed: request.seed ?? (request.temperature > 0 ? randomSeed() : undefined),
            signal,
            stopOnAbortSignal: true,
            onResponseChunk: (chunk) => {
              completionTokens += chunk.tokens.length;
              // Segments (e.g. a reasoning model's thoughts) are not part of the reply text, and the
              // final chunk is empty.
              if (chunk.type === undefined && chunk.text !== "") {
                pieces.push(chunk.text);
                emit(chunk.text);
              }
            },
          })
          .catch((err: unknown) => {
            // Aborted before the first token: LlamaChat throws the signal's reason instead of returning.
            if (signal.aborted) return undefined;
            throw err;
          });
        // The sequence is free once evaluation ends, even while the consumer still reads buffered pieces.
        void running.then(lease.release, lease.release);
        return running;
      });

      return {
        text: pieces.join(""),
        finishReason: finishReason(response),
        promptTokens: prompt.tokens.length,
        cachedTokens,
        completionTokens,
        prompt: this.model.detokenize(prompt.tokens, true),
      };
    } finally {
      stop.abort();
      await running?.catch(() => undefined);
      lease.release();
    }
  }

  /** Releases the model and native memory. Waiting requests fail; call after in-flight ones end. */
  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    this.pool.close(new Error("Engine is disposed"));
    for (const { chat } of this.slots) chat.dispose();
    await this.context.dispose();
    await this.model.dispose();
    await this.llama.dispose();
  }

  /**
   * Prompt tokens allowed, leaving room for the reply. Reserving the whole `maxTokens` would
   * discard history for replies that are usually short, so at most a quarter of the context is
   * held back; a reply that outgrows the room left ends with finishReason "length".
   */
  private promptBudget(maxTokens: number): number {
    const size = this.context.contextSize;
    // One more for the token LlamaChat must leave free at the end of the context.
    return size - 1 - Math.max(1, Math.min(maxTokens, Math.floor(size / 4)));
  }
}

function finishReason(response: LlamaChatResponse | undefined): FinishReason {
  switch (response?.metadata.stopReason) {
    case undefined:
    case "abort":
      return "cancelled";
    case "maxTokens":
      return "length";
    default:
      return "stop";
  }
}

/** Below this size a model's matrices are too small to split: thread hand-offs cost more than they save. */
const TINY_MODEL_BYTES = 32 * 1024 * 1024;

/**
 * llama.cpp's count of math cores (physical cores, no hyper-threads). On the 2-core machines we
 * measured, the demo model ran ~2x faster on 1 thread than on 2; real models gain from every core.
 */
function defaultThreads(llama: Llama, model: LlamaModel): number {
  return model.size < TINY_MODEL_BYTES ? 1 : Math.max(1, llama.cpuMathCores);
}

function randomSeed(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0]!;
}
