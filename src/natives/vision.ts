/**
 * Images in prompts through Parley's compiled natives (src/natives/vision.cpp, llama.cpp's mtmd):
 * a context's projector, and a prompt evaluated with its images into a sequence, recorded as
 * node-llama-cpp's own evaluation records tokens. The npm prebuilt has none of it.
 */
import type { LlamaContext, LlamaContextSequence, Token } from "node-llama-cpp";
import { internals, locked, type SequenceInternals } from "./addon";

/**
 * What a sequence records at an image's positions: no token's id, so no prompt ever reuses them
 * by comparing tokens (an image's cells are its own, whatever came before them).
 */
export const IMAGE_POSITION = -1 as Token;

/** A prompt's piece as the natives evaluated it: text tokens, or one image's embeddings over its positions. */
export type PromptChunk = { kind: "text"; tokens: Token[] } | { kind: "image"; tokens: number; positions: number };

const noVision = () => new Error("these natives take no images: Parley's compiled natives do (`bun run natives`, or the executable)");

/** Whether the context's natives take images. */
export function seesImages(context: LlamaContext): boolean {
  return internals<{ _ctx: { evalPrompt?: unknown } }>(context)._ctx.evalPrompt !== undefined;
}

/**
 * Loads the projector (an mmproj file) for the context's model, in place of any it had; resolves
 * to the marker that stands for an image in a prompt's text.
 */
export async function loadProjector(context: LlamaContext, path: string, threads: number): Promise<string> {
  return await locked(context, async (ctx) => {
    if (!ctx.loadProjector) throw noVision();
    return await ctx.loadProjector(path, threads);
  });
}

/** Frees the context's projector, before the context is disposed. */
export async function unloadProjector(context: LlamaContext): Promise<void> {
  await locked(context, (ctx) => ctx.unloadProjector?.());
}

/**
 * Evaluates `text` (its markers, one per image in order) with the images after what the sequence
 * holds, the last token's logits kept for sampling: its chunks. `addSpecial` adds the model's
 * beginning-of-text token, as a prompt from scratch has it.
 */
export async function evalPrompt(sequence: LlamaContextSequence, text: string, images: readonly Uint8Array[], addSpecial: boolean): Promise<PromptChunk[]> {
  const { context } = sequence;
  return await locked(context, async (ctx) => {
    if (!ctx.evalPrompt) throw noVision();
    const seq = internals<SequenceInternals>(sequence);
    const layout = await ctx.evalPrompt(seq._sequenceId, seq._nextTokenIndex, text, [...images], context.batchSize, addSpecial);
    const chunks: PromptChunk[] = [];
    for (let at = 0; at < layout.length; ) {
      const [kind, tokens, positions] = [layout[at]!, layout[at + 1]!, layout[at + 2]!];
      at += 3;
      if (kind === 0) {
        const text = Array.from(layout.subarray(at, (at += tokens)), (token) => token as Token);
        chunks.push({ kind: "text", tokens: text });
        for (const token of text) seq._contextTokens.push(token);
      } else {
        chunks.push({ kind: "image", tokens, positions });
        for (let i = 0; i < positions; i++) seq._contextTokens.push(IMAGE_POSITION);
      }
      seq._nextTokenIndex += positions;
    }
    return chunks;
  });
}
