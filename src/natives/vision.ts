/**
 * Images in prompts through Parley's compiled natives (src/natives/vision.cpp, llama.cpp's mtmd):
 * a context's projector, how an image stands in a prompt, and an image's chunk evaluated into a
 * sequence, recorded as node-llama-cpp's own evaluation records tokens. The npm prebuilt has none
 * of it.
 */
import type { LlamaContext, LlamaContextSequence, Token } from "node-llama-cpp";
import { internals, locked, type SequenceInternals, undisposed } from "./addon";
import { inflatesWithinRows } from "./png-inflate";

/** A piece of how an image stands in a prompt: text tokens the projector puts around it, or image embeddings over their positions. */
export type ImageChunk = { kind: "text"; tokens: Token[] } | { kind: "image"; tokens: number; positions: number };

const noVision = () => new Error("these natives take no images: Parley's compiled natives do (`bun run natives`, or the executable)");

/** Whether the context's natives take images. */
export function seesImages(context: LlamaContext): boolean {
  return internals<{ _ctx: { evalImage?: unknown } }>(context)._ctx.evalImage !== undefined;
}

/** Loads the projector (an mmproj file) for the context's model, in place of any it had. */
export async function loadProjector(context: LlamaContext, path: string, threads: number): Promise<void> {
  await locked(context, async (ctx) => {
    if (!ctx.loadProjector) throw noVision();
    await ctx.loadProjector(path, threads);
  });
}

/** Frees the context's projector, before the context is disposed. */
export async function unloadProjector(context: LlamaContext): Promise<void> {
  await locked(context, (ctx) => ctx.unloadProjector?.());
}

/**
 * How the image (its file's bytes) stands in a prompt, as llama.cpp's mtmd tokenizes a marker with
 * it: a prompt's tokens are its texts' tokens, each tokenized on its own, with these in place of
 * each image. Rejects what cannot be decoded as a picture. The natives keep the image as they
 * prepared it (decoded, resized) under `key`, among the last few, for `evalImage` with that key.
 */
export async function imageLayout(context: LlamaContext, image: Uint8Array, key: string): Promise<ImageChunk[]> {
  if (!(await inflatesWithinRows(image))) throw new Error("its image data inflates to more than its header's rows take");
  // Beside the batches, as llama-server lays a picture out beside its decode loop: it touches no sequence.
  const layout = await undisposed(context, async (ctx) => {
    if (!ctx.imageLayout) throw noVision();
    return await ctx.imageLayout(image, key);
  });
  const chunks: ImageChunk[] = [];
  for (let at = 0; at < layout.length; ) {
    const [kind, tokens, positions] = [layout[at]!, layout[at + 1]!, layout[at + 2]!];
    at += 3;
    if (kind === 0) chunks.push({ kind: "text", tokens: Array.from(layout.subarray(at, (at += tokens)), (token) => token as Token) });
    else chunks.push({ kind: "image", tokens, positions });
  }
  return chunks;
}

/** A chunk of a picture's layout to evaluate: the picture, the key it was laid out under, which chunk, and its positions. */
export interface ImagePiece {
  image: Uint8Array;
  key: string;
  chunk: number;
  positions: number;
}

/**
 * Evaluates the piece (an image chunk of the picture's layout) after what the sequence holds,
 * recorded as `placeholder` at each of its positions: no token's id, so a prompt reuses these
 * cells only where it has that very placeholder there.
 */
export async function evalImage(sequence: LlamaContextSequence, { image, key, chunk, positions }: ImagePiece, placeholder: Token): Promise<void> {
  const { context } = sequence;
  await locked(context, async (ctx) => {
    if (!ctx.evalImage) throw noVision();
    const seq = internals<SequenceInternals>(sequence);
    // llama.cpp holds a causal context's batch to its size: a small context's batch is smaller than asked for.
    const batch = Math.min(context.batchSize, context.contextSize);
    const taken = await ctx.evalImage(seq._sequenceId, seq._nextTokenIndex, image, key, chunk, batch);
    if (taken !== positions) {
      ctx.removeTokenCellsFromSequence(seq._sequenceId, seq._nextTokenIndex, -1);
      throw new Error(`the image took ${taken} positions where its layout has ${positions}`);
    }
    for (let i = 0; i < positions; i++) seq._contextTokens.push(placeholder);
    seq._nextTokenIndex += positions;
  });
}
