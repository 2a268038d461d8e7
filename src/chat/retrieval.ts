/**
 * Retrieval: texts embedded, and documents ranked against a query, by a retrieval model the
 * request names. Each request's tokens count to its user as prompt tokens (a quota holds them
 * before the model runs, as it holds a reply's prompt). It knows nothing of HTTP.
 */
import type { Token } from "node-llama-cpp";
import { InvalidInput, isAbort } from "../errors";
import type { Embedder } from "../llm/embedder";
import type { Held } from "../llm/loaded-models";
import type { TokenHold, TokenLedger } from "./token-ledger";
import type { TurnHooks } from "./turn-runner";

/** What a retrieval model is for. */
export type RetrievalPurpose = Embedder["purpose"];

/** Where retrieval finds the model a request names, held while it runs. */
export interface RetrievalSource {
  /** `InvalidInput` naming the model when it is not for `purpose`; `ModelNotFound`, `Overloaded` as for turns. */
  holdRetrieval(model: string | undefined, purpose: RetrievalPurpose, signal?: AbortSignal, keepAliveMs?: number): Promise<Held<Embedder>>;
}

/** The retrieval of a service of one chat engine (`oneEngine`): it has no retrieval model. */
export const NO_RETRIEVAL_MODELS: RetrievalSource = {
  holdRetrieval: async (_model, purpose) => {
    throw new InvalidInput({ part: "model" }, `this service has no ${purpose} model`);
  },
};

/** A text, or a text already tokenized (token ids of the model's). */
export type RetrievalInput = string | readonly number[];

export interface EmbedRequest extends TurnHooks {
  userId: number;
  inputs: readonly RetrievalInput[];
  /** The width asked for: only the model's own is given. */
  dimensions?: number;
  /** An input past what the model takes is cut to its first tokens, rather than refused. */
  truncate?: boolean;
  /** To length 1, as llama-server's (default); false: as the model pools them. */
  normalize?: boolean;
}

export interface EmbedResult {
  model: string;
  vectors: Float32Array[];
  promptTokens: number;
}

export interface RankRequest extends TurnHooks {
  userId: number;
  query: string;
  documents: readonly string[];
  /** The best this many; default all. */
  topN?: number;
}

export interface RankResult {
  model: string;
  /** Best first; `index` is the document's in the request. */
  ranked: { index: number; score: number }[];
  promptTokens: number;
}

export class RetrievalService {
  constructor(
    private readonly models: RetrievalSource,
    private readonly ledger?: TokenLedger,
  ) {}

  /** The vectors; undefined when the caller left (its signal aborted) before they were made. */
  async embed(request: EmbedRequest): Promise<EmbedResult | undefined> {
    const inputsOf = (embedder: Embedder) => {
      if (request.dimensions !== undefined && request.dimensions !== embedder.dimensions) {
        throw new InvalidInput({ part: "dimensions" }, `the model's embeddings have ${embedder.dimensions} dimensions, and it cannot give others`);
      }
      return request.inputs.map((input, index) => {
        const tokens = typeof input === "string" ? embedder.embeddingTokens(input) : (input as Token[]);
        return checked(embedder, request.truncate ? tokens.slice(0, embedder.contextSize) : tokens, index);
      });
    };
    return await this.pool(request, "embedding", inputsOf, async (embedder, inputs, signal) => ({
      vectors: await embedder.embed(inputs, signal, request.normalize ?? true),
    }));
  }

  /** The documents ranked; undefined when the caller left before they were. */
  async rank(request: RankRequest): Promise<RankResult | undefined> {
    const inputsOf = (embedder: Embedder) =>
      request.documents.map((document, index) => checked(embedder, embedder.rankingTokens(request.query, document), index));
    return await this.pool(request, "ranking", inputsOf, async (embedder, inputs, signal) => {
      const scores = await embedder.rank(inputs, signal);
      const ranked = scores.map((score, index) => ({ index, score })).sort((a, b) => b.score - a.score || a.index - b.index);
      return { ranked: ranked.slice(0, request.topN ?? ranked.length) };
    });
  }

  /**
   * Holds the model, then the user's share of the budget for the inputs' tokens, pools them and
   * counts them. A caller gone is no failure: there is no one left to answer (undefined).
   */
  private async pool<T>(
    request: TurnHooks & { userId: number },
    purpose: RetrievalPurpose,
    inputsOf: (embedder: Embedder) => Token[][],
    compute: (embedder: Embedder, inputs: Token[][], signal?: AbortSignal) => Promise<T>,
  ): Promise<(T & { model: string; promptTokens: number }) | undefined> {
    let held: Held<Embedder> | undefined;
    try {
      held = await this.models.holdRetrieval(request.model, purpose, request.signal, request.keepAliveMs);
      const inputs = inputsOf(held.engine);
      const promptTokens = inputs.reduce((sum, tokens) => sum + tokens.length, 0);
      const hold = await this.hold(request, promptTokens);
      let result: T;
      try {
        result = await compute(held.engine, inputs, request.signal);
      } catch (error) {
        if (hold) await this.ledger!.release(hold);
        throw error;
      }
      const state = await this.ledger?.settle(request.userId, hold, promptTokens, 0);
      if (state) request.onQuota?.(state);
      return { ...result, model: held.engine.modelName, promptTokens };
    } catch (error) {
      if (isAbort(error) && request.signal?.aborted) return undefined;
      throw error;
    } finally {
      held?.release();
    }
  }

  private async hold(request: TurnHooks & { userId: number }, tokens: number): Promise<TokenHold | undefined> {
    const rule = await this.ledger?.rule(request.userId);
    if (!rule) return undefined;
    const { hold, state } = await this.ledger!.hold(request.userId, rule, tokens, tokens);
    request.onQuota?.(state);
    return hold;
  }
}

/** The input's tokens, if the model can pool them whole: some, each one of its own, no more than an input may have. */
function checked(embedder: Embedder, tokens: Token[], index: number): Token[] {
  if (tokens.length === 0) throw new InvalidInput({ part: "input", index }, "is empty: it has no tokens to pool");
  if (tokens.length > embedder.contextSize) {
    throw new InvalidInput({ part: "input", index }, `has ${tokens.length} tokens, more than the ${embedder.contextSize} an input of this model may have`);
  }
  const { vocabularySize } = embedder;
  const outside = tokens.find((token) => !Number.isInteger(token) || token < 0 || token >= vocabularySize);
  if (outside !== undefined)
    throw new InvalidInput({ part: "input", index }, `holds ${outside}, which is no token of the model's (0 to ${vocabularySize - 1})`);
  return tokens;
}
