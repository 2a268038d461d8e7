/**
 * A draft model (`PARLEY_DRAFT_MODEL`): a smaller model of the same vocabulary whose greedy
 * continuation of each reply the scheduler's steps verify, as they verify lookup guesses (the
 * reply stays the target model's, token for token). Its context has a sequence per slot, kept in
 * step with the slot lazily: before each proposal what the draft sequence holds is compared with
 * the slot's tokens, what differs is erased and what is missing evaluated. A draft sequence is
 * emptied when its slot serves another scope, so no user's drafts start from another user's tokens.
 * Loaded by the engine's `Llama`, it is released with it.
 */
import type { Llama, LlamaContext, LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";
import { checkInternals, decodeBatch, Sampler } from "../natives/addon";
import { samplingOf } from "./types";

/** What the scheduler asks a draft of: the slot's tokens (its pending token last), under its scope. */
export interface DraftRequest {
  slot: number;
  scope: string;
  tokens: Token[];
}

export class DraftModel {
  /** The scope each draft sequence's tokens were evaluated in. */
  private readonly scopes: (string | undefined)[];

  private constructor(
    private readonly context: LlamaContext,
    private readonly sequences: readonly LlamaContextSequence[],
    private readonly greedy: Sampler,
    /** The draft model's size over the target's: what a draft step costs in target steps. */
    readonly weight: number,
  ) {
    this.scopes = sequences.map(() => undefined);
  }

  /**
   * Loads the draft model beside `target` with a context like the target's; refuses one whose
   * vocabulary is not the target's token for token (its guesses would be other tokens' ids).
   */
  static async load(
    llama: Llama,
    modelPath: string,
    target: LlamaModel,
    options: { contextSize: number; sequences: number; threads: number },
  ): Promise<DraftModel> {
    // On the served model's device: a draft step's worth is its speed beside the served model's.
    const model = await llama.loadModel({ modelPath, gpuLayers: llama.gpu === false ? 0 : "max" });
    try {
      const mismatch = vocabularyMismatch(model, target);
      if (mismatch !== undefined) throw new Error(`the draft model ${modelPath} cannot draft for this model: ${mismatch}`);
      const context = await model.createContext({ contextSize: options.contextSize, sequences: options.sequences, threads: options.threads });
      const sequences = Array.from({ length: options.sequences }, () => context.getSequence());
      checkInternals(context, model, sequences[0]!);
      return new DraftModel(context, sequences, new Sampler(context, model, samplingOf({ temperature: 0 })), model.size / target.size);
    } catch (error) {
      await model.dispose();
      throw error;
    }
  }

  /** Each request's `length` next tokens, by the draft model's greedy choice. */
  async propose(requests: readonly DraftRequest[], length: number): Promise<Token[][]> {
    const sequences = requests.map(({ slot }) => this.sequences[slot]!);
    const missing: Token[][] = [];
    for (const [i, { slot, scope, tokens }] of requests.entries()) {
      const sequence = sequences[i]!;
      if (this.scopes[slot] !== scope) {
        await sequence.clearHistory();
        this.scopes[slot] = scope;
      }
      // The last token is evaluated again in any case: its logits give the first guess.
      const kept = Math.min(sequence.compareContextTokens(tokens).firstDifferentIndex, tokens.length - 1);
      if (kept < sequence.nextTokenIndex) await sequence.eraseContextTokenRanges([{ start: kept, end: sequence.nextTokenIndex }]);
      missing.push(tokens.slice(kept));
    }
    const drafts: Token[][] = requests.map(() => []);
    if (length < 1) return drafts;
    // What each draft sequence lacks, a batch's share at a time; the last piece samples the first guess.
    const share = Math.max(1, Math.floor(this.context.batchSize / requests.length));
    while (missing.some((tokens) => tokens.length > share)) {
      const entries = sequences.flatMap((sequence, i) => (missing[i]!.length > share ? [{ sequence, tokens: missing[i]!.splice(0, share) }] : []));
      await decodeBatch(this.context, entries);
    }
    let inputs = missing;
    for (let step = 0; step < length; step++) {
      const room = sequences.every((sequence, i) => sequence.nextTokenIndex + inputs[i]!.length < this.context.contextSize);
      if (!room) break;
      const sampled = await decodeBatch(
        this.context,
        sequences.map((sequence, i) => ({ sequence, tokens: inputs[i]!, sampler: this.greedy })),
      );
      for (const [i, taken] of sampled.entries()) drafts[i]!.push(taken!.token);
      inputs = drafts.map((draft) => [draft.at(-1)!]);
    }
    return drafts;
  }
}

/** Why the two models' vocabularies differ, or undefined where they are the same tokens in the same order. */
function vocabularyMismatch(draft: LlamaModel, target: LlamaModel): string | undefined {
  const tokensOf = (model: LlamaModel) => model.fileInfo.metadata.tokenizer?.ggml?.tokens ?? [];
  const [mine, theirs] = [tokensOf(draft), tokensOf(target)];
  if (mine.length !== theirs.length) return `its vocabulary has ${mine.length} tokens, this model's ${theirs.length}`;
  const at = mine.findIndex((token, i) => token !== theirs[i]);
  return at < 0 ? undefined : `token ${at} is ${JSON.stringify(mine[at])} in it, ${JSON.stringify(theirs[at])} in this model`;
}
