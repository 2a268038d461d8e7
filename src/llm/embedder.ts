/**
 * The engine of a retrieval model: one whose output is its input pooled, into a vector (an
 * embedding model) or into relevance scores (a reranker), as its file declares. One context, with
 * `parallel` sequences, which one loop owns: inputs wait in a queue per scope, and each decode
 * takes as many of them as fit its batch, one sequence each (llama-server batches its slots'
 * inputs so too), from the scopes in turn, so that a request with few inputs is not served after
 * every input of a larger one. It knows nothing of HTTP or storage; a scope is an opaque key (the
 * caller's user).
 */
import type { LlamaContext, LlamaModel, Token } from "node-llama-cpp";
import { append } from "../append";
import { Overloaded } from "../errors";
import { POOLING } from "../gguf/describe";
import { createPoolingContext, decodePooled, inputTokens, poolsSequences } from "../natives/addon";
import { contextSizeFor } from "./engine";
import { type DeviceUse, deviceUse, type LoadedLlama, type LoadOptions, loadLlamaModel, modelNameOf, overloadedOnGpu } from "./llama-load";
import { abortError } from "./pool";
import { type FlashAttentionMode, type KvType, kvCacheTypes } from "./types";

export interface EmbedderOptions extends LoadOptions {
  /** Tokens one input may have. Default: the model's training context, capped at 4096. */
  contextSize?: number;
  /** Inputs decoded together. Default 2. */
  parallel?: number;
  /** Inputs that may wait for a decode, of every scope; more are refused (`Overloaded`). Default 4096. */
  queueMax?: number;
  flashAttention?: FlashAttentionMode;
  kvType?: KvType;
}

/** Architectures whose ranking pools the last token (llama.cpp's graph): a sequence split over several pieces of a batch pools right. */
const LAST_TOKEN_RANKERS = new Set(["qwen3", "qwen3vl"]);

interface Job {
  tokens: readonly Token[];
  resolve(pooled: Float32Array): void;
  reject(error: unknown): void;
}

export interface PoolOptions {
  /** Whose inputs these are: scopes are served in turn. Default "". */
  scope?: string;
  /** Takes the inputs still waiting off the queue. */
  signal?: AbortSignal;
}

export class Embedder {
  readonly loadedAt = Math.floor(Date.now() / 1000);
  /** Token ids go from 0 to one below this. */
  readonly vocabularySize: number;
  /** The model's ranking prompt (`tokenizer.chat_template.rerank`), if it has one. */
  private readonly rankingTemplate: string | undefined;
  /** llama.cpp's `add_sep`: the file's, else on for BERT's WordPiece tokenizer. */
  private readonly addsSeparator: boolean;
  /** The inputs waiting, each scope's in order, the scopes in the order their turns come. */
  private waiting = new Map<string, Job[]>();
  private waitingCount = 0;
  private running: Promise<void> | undefined;
  private closed = false;

  private constructor(
    private readonly loaded: LoadedLlama,
    readonly modelName: string,
    readonly device: DeviceUse,
    private readonly context: LlamaContext,
    readonly purpose: "embedding" | "ranking",
    /** Whether one decode may hold several inputs: llama.cpp pools a sequence right only within one piece of a batch, unless it pools its last token. */
    private readonly together: boolean,
    private readonly queueMax: number,
  ) {
    const { tokenizer } = loaded.model.fileInfo.metadata;
    this.vocabularySize = tokenizer.ggml.tokens.length;
    const template = (tokenizer as Record<string, unknown>)["chat_template.rerank"];
    this.rankingTemplate = typeof template === "string" ? template : undefined;
    const ggml = tokenizer.ggml as { add_sep_token?: unknown; model?: unknown };
    this.addsSeparator = typeof ggml.add_sep_token === "boolean" ? ggml.add_sep_token : ggml.model === "bert";
  }

  static async load(options: EmbedderOptions): Promise<Embedder> {
    const loaded = await loadLlamaModel(options);
    const { llama, model, threads } = loaded;
    try {
      const size = contextSizeFor(options.contextSize, model.trainContextSize);
      const parallel = options.parallel ?? 2;
      // The batch is the input's limit: llama-server also takes an input to pool in one batch.
      const context = await createPoolingContext(model, {
        contextSize: size,
        sequences: parallel,
        threads,
        batchSize: size,
        flashAttention: options.flashAttention !== "off",
        ...kvCacheTypes(options.kvType),
      }).catch(overloadedOnGpu(options.modelPath));
      const { pooling, architecture } = poolingOf(model);
      const lastToken = pooling === POOLING.last || (pooling === POOLING.rank && LAST_TOKEN_RANKERS.has(architecture));
      return new Embedder(
        loaded,
        modelNameOf(options, model),
        await deviceUse(llama, model),
        context,
        pooling === POOLING.rank ? "ranking" : "embedding",
        lastToken && parallel > 1 && poolsSequences(context),
        options.queueMax ?? 4096,
      );
    } catch (error) {
      await llama.dispose();
      throw error;
    }
  }

  get threads(): number {
    return this.loaded.threads;
  }

  get natives(): string {
    return this.loaded.natives;
  }

  /** Tokens one input may have. */
  get contextSize(): number {
    return this.context.contextSize;
  }

  /** The width of an embedding. */
  get dimensions(): number {
    return this.loaded.model.embeddingVectorSize;
  }

  /** A text to embed as llama-server tokenizes it: the model's special tokens added, special tokens' texts parsed. */
  embeddingTokens(text: string): Token[] {
    return inputTokens(this.context, this.loaded.model, text);
  }

  /**
   * A query and a document as llama-server renders them for ranking: into the model's ranking
   * prompt (`tokenizer.chat_template.rerank`, `{query}` and `{document}` replaced) tokenized whole,
   * else the query and the document between the special tokens the model adds. The placeholders
   * are looked for in the template only, in one pass: llama-server replaces `{document}` after
   * `{query}`, so a query holding `{document}` has the document written into it once per
   * occurrence, which makes a small request a huge prompt. Texts without a placeholder's text
   * render as there.
   */
  rankingTokens(query: string, document: string): Token[] {
    const { model } = this.loaded;
    const template = this.rankingTemplate;
    if (template !== undefined) {
      // A function's result is inserted as it is: a replacement string would expand `$&` and its kin.
      return model.tokenize(
        template.replace(/\{query\}|\{document\}/g, (placeholder) => (placeholder === "{query}" ? query : document)),
        true,
      );
    }
    const { bos, eos, sep, shouldPrependBosToken, shouldAppendEosToken } = model.tokens;
    const end = eos ?? sep;
    const ends = shouldAppendEosToken && end !== null ? [end] : [];
    const separator = this.addsSeparator && sep !== null ? [sep] : [];
    return [...(shouldPrependBosToken && bos !== null ? [bos] : []), ...model.tokenize(query), ...ends, ...separator, ...model.tokenize(document), ...ends];
  }

  /** Each input's embedding, normalized to length 1 (llama-server's default) unless `normalize` is false. */
  async embed(inputs: readonly (readonly Token[])[], options: PoolOptions & { normalize?: boolean } = {}): Promise<Float32Array[]> {
    const pooled = await this.pool(inputs, options);
    return options.normalize === false ? pooled : pooled.map(normalized);
  }

  /** Each input's relevance score: the first of its pooled outputs, as llama-server reports it. */
  async rank(inputs: readonly (readonly Token[])[], options: PoolOptions = {}): Promise<number[]> {
    return (await this.pool(inputs, options)).map((scores) => scores[0]!);
  }

  /** Refuses what waits; a decode in flight ends first (the context's disposal waits for it). */
  async close(): Promise<void> {
    this.closed = true;
    const waiting = [...this.waiting.values()].flat();
    this.waiting.clear();
    this.waitingCount = 0;
    for (const job of waiting) job.reject(new Overloaded("the model is being unloaded", 2_000));
    await this.running;
    await this.loaded.llama.dispose();
  }

  /** The inputs' pooled outputs, in order, queued behind the scope's earlier ones; the signal takes those still waiting off the queue. */
  private pool(inputs: readonly (readonly Token[])[], { scope = "", signal }: PoolOptions): Promise<Float32Array[]> {
    if (this.closed) return Promise.reject(new Overloaded("the model is being unloaded", 2_000));
    if (signal?.aborted) return Promise.reject(abortError(signal));
    // Nothing to queue: a loop started on an empty queue would end before it is recorded as running.
    if (inputs.length === 0) return Promise.resolve([]);
    if (this.waitingCount + inputs.length > this.queueMax) return Promise.reject(new Overloaded("too many inputs are waiting for the model", 1_000));
    const jobs: Job[] = [];
    const results = Promise.all(inputs.map((tokens) => new Promise<Float32Array>((resolve, reject) => jobs.push({ tokens, resolve, reject }))));
    const queue = this.waiting.get(scope);
    if (queue) append(queue, jobs);
    else this.waiting.set(scope, jobs.slice());
    this.waitingCount += jobs.length;
    const aborted = () => {
      const mine = new Set(jobs);
      const scoped = this.waiting.get(scope) ?? [];
      const others = scoped.filter((job) => !mine.has(job));
      this.waitingCount -= scoped.length - others.length;
      if (others.length > 0) this.waiting.set(scope, others);
      else this.waiting.delete(scope);
      for (const job of jobs) job.reject(abortError(signal!));
    };
    signal?.addEventListener("abort", aborted, { once: true });
    this.running ??= this.drain();
    return results.finally(() => signal?.removeEventListener("abort", aborted));
  }

  /** The loop: decodes the waiting inputs, as many a batch as fit it, until none waits. */
  private async drain(): Promise<void> {
    try {
      while (this.waitingCount > 0) {
        const batch = this.nextBatch();
        try {
          const pooled = await decodePooled(
            this.context,
            batch.map((job) => job.tokens),
          );
          for (const [i, job] of batch.entries()) job.resolve(pooled[i]!);
        } catch (error) {
          for (const job of batch) job.reject(error);
        }
      }
    } finally {
      this.running = undefined;
    }
  }

  /**
   * The next inputs, one from each scope in turn (a scope served goes to the back of the turns),
   * as many as there are sequences and the batch's tokens allow (at least one).
   */
  private nextBatch(): Job[] {
    const limit = this.together ? this.context.totalSequences : 1;
    const batch: Job[] = [];
    let tokens = 0;
    for (const [scope, queue] of this.waiting) {
      const job = queue[0]!;
      if (batch.length === limit || (batch.length > 0 && tokens + job.tokens.length > this.contextSize)) break;
      queue.shift();
      this.waiting.delete(scope);
      if (queue.length > 0) this.waiting.set(scope, queue);
      batch.push(job);
      tokens += job.tokens.length;
    }
    this.waitingCount -= batch.length;
    return batch;
  }
}

function normalized(vector: Float32Array): Float32Array {
  let sum = 0;
  for (const x of vector) sum += x * x;
  const norm = Math.sqrt(sum);
  return norm > 0 ? vector.map((x) => x / norm) : vector;
}

function poolingOf(model: LlamaModel): { pooling: number | undefined; architecture: string } {
  const metadata = model.fileInfo.metadata as Record<string, unknown> & { general: { architecture?: string } };
  const architecture = String(metadata.general.architecture ?? "");
  const pooling = (metadata[architecture] as { pooling_type?: unknown } | undefined)?.pooling_type;
  return { pooling: typeof pooling === "number" ? pooling : undefined, architecture };
}
