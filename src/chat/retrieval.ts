/**
 * Retrieval: texts embedded, and documents ranked against a query, by a retrieval model the
 * request names. What a request asks to tokenize is bounded before any of it is, and tokenized in
 * slices that let other requests in; each user's inputs wait for the model in a queue of their
 * own, served in turn with the other users'. Each request's tokens count to its user as prompt
 * tokens (a quota holds them before the model runs, as it holds a reply's prompt). It knows
 * nothing of HTTP.
 */
import type { Token } from "node-llama-cpp";
import { InvalidInput, isAbort } from "../errors";
import type { Embedder } from "../llm/embedder";
import type { Held } from "../llm/loaded-models";
import { abortError } from "../llm/pool";
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

/**
 * The characters (UTF-16 code units) a request may ask to tokenize, refused past them before any
 * is: tokenizing holds the JS thread, and a ranking tokenizes the query once per document. One
 * text (a ranking's query with one document) may have `text`, all of a request's `request`.
 */
export const RETRIEVAL_CHARACTERS = { text: 262_144, request: 2_097_152 } as const;

/** How long tokenizing goes on before the event loop is let in. */
const SLICE_MS = 10;

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
  /** How long the request waited for its model: its load, where it was not loaded. */
  loadMs: number;
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

  /**
   * The vectors; undefined when the caller left (its signal aborted) before they were made. A text
   * to `truncate` is cut to the characters one text may have before it is tokenized.
   */
  async embed(request: EmbedRequest): Promise<EmbedResult | undefined> {
    const texts = request.inputs.map((input) => (typeof input !== "string" ? undefined : request.truncate ? cut(input, RETRIEVAL_CHARACTERS.text) : input));
    checkCharacters(
      texts.map((text) => text?.length ?? 0),
      "",
    );
    const inputsOf = async (embedder: Embedder) => {
      if (request.dimensions !== undefined && request.dimensions !== embedder.dimensions) {
        throw new InvalidInput({ part: "dimensions" }, `the model's embeddings have ${embedder.dimensions} dimensions, and it cannot give others`);
      }
      return await inSlices(request.inputs, request.signal, (input, index) => {
        const text = texts[index];
        const tokens = text !== undefined ? embedder.embeddingTokens(text) : (input as Token[]);
        return checked(embedder, request.truncate ? tokens.slice(0, embedder.contextSize) : tokens, index, "");
      });
    };
    return await this.pool(request, "embedding", inputsOf, async (embedder, inputs, options) => ({
      vectors: await embedder.embed(inputs, { ...options, normalize: request.normalize ?? true }),
    }));
  }

  /** The documents ranked; undefined when the caller left before they were. */
  async rank(request: RankRequest): Promise<RankResult | undefined> {
    checkCharacters(
      request.documents.map((document) => request.query.length + document.length),
      " with the query",
    );
    const inputsOf = (embedder: Embedder) =>
      inSlices(request.documents, request.signal, (document, index) =>
        checked(embedder, embedder.rankingTokens(request.query, document), index, " with the query"),
      );
    return await this.pool(request, "ranking", inputsOf, async (embedder, inputs, options) => {
      const scores = await embedder.rank(inputs, options);
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
    inputsOf: (embedder: Embedder) => Promise<Token[][]>,
    compute: (embedder: Embedder, inputs: Token[][], options: { scope: string; signal?: AbortSignal }) => Promise<T>,
  ): Promise<(T & { model: string; promptTokens: number; loadMs: number }) | undefined> {
    let held: Held<Embedder> | undefined;
    try {
      const asked = performance.now();
      held = await this.models.holdRetrieval(request.model, purpose, request.signal, request.keepAliveMs);
      const loadMs = performance.now() - asked;
      const inputs = await inputsOf(held.engine);
      const promptTokens = inputs.reduce((sum, tokens) => sum + tokens.length, 0);
      const hold = await this.hold(request, promptTokens);
      let result: T;
      try {
        result = await compute(held.engine, inputs, { scope: String(request.userId), ...(request.signal ? { signal: request.signal } : {}) });
      } catch (error) {
        if (hold) await this.ledger!.release(hold);
        throw error;
      }
      const state = await this.ledger?.settle(request.userId, hold, promptTokens, 0);
      if (state) request.onQuota?.(state);
      return { ...result, model: held.engine.modelName, promptTokens, loadMs };
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

/**
 * Refuses, before anything is tokenized, a text (`lengths`, each text's characters) past what one
 * may have, or the first that takes the request past what all may. `withWhat` says what each
 * length counts beside the text.
 */
function checkCharacters(lengths: readonly number[], withWhat: string): void {
  let total = 0;
  for (const [index, length] of lengths.entries()) {
    if (length > RETRIEVAL_CHARACTERS.text) {
      throw new InvalidInput({ part: "input", index }, `has ${length} characters${withWhat}, more than the ${RETRIEVAL_CHARACTERS.text} one text may have`);
    }
    total += length;
    if (total > RETRIEVAL_CHARACTERS.request) {
      throw new InvalidInput(
        { part: "input", index },
        `brings the request's texts to ${total} characters${withWhat === "" ? "" : ` (each${withWhat})`}, more than the ${RETRIEVAL_CHARACTERS.request} a request may have`,
      );
    }
  }
}

/** `text`'s first `length` characters at most, no surrogate pair cut in two. */
function cut(text: string, length: number): string {
  if (text.length <= length) return text;
  const code = text.charCodeAt(length - 1);
  return text.slice(0, code >= 0xd800 && code <= 0xdbff ? length - 1 : length);
}

/** Each item's tokens, the event loop let in whenever a slice of time is used up; a caller gone stops it. */
async function inSlices<T>(items: readonly T[], signal: AbortSignal | undefined, tokenize: (item: T, index: number) => Token[]): Promise<Token[][]> {
  const all: Token[][] = [];
  let sliceStart = performance.now();
  for (const [index, item] of items.entries()) {
    if (performance.now() - sliceStart > SLICE_MS) {
      await new Promise((resolve) => setImmediate(resolve));
      if (signal?.aborted) throw abortError(signal);
      sliceStart = performance.now();
    }
    all.push(tokenize(item, index));
  }
  return all;
}

/** The input's tokens, if the model can pool them whole: some, each one of its own, no more than an input may have. */
function checked(embedder: Embedder, tokens: Token[], index: number, withWhat: string): Token[] {
  if (tokens.length === 0) throw new InvalidInput({ part: "input", index }, "is empty: it has no tokens to pool");
  if (tokens.length > embedder.contextSize) {
    throw new InvalidInput(
      { part: "input", index },
      `has ${tokens.length} tokens${withWhat}, more than the ${embedder.contextSize} an input of this model may have`,
    );
  }
  const { vocabularySize } = embedder;
  const outside = tokens.find((token) => !Number.isInteger(token) || token < 0 || token >= vocabularySize);
  if (outside !== undefined)
    throw new InvalidInput({ part: "input", index }, `holds ${outside}, which is no token of the model's (0 to ${vocabularySize - 1})`);
  return tokens;
}
