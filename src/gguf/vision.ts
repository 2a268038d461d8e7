// The vision preset's projector (`mmproj-<model>.gguf`): a LLaVA-style ("mlp") CLIP projector,
// as llama.cpp's mtmd loads it beside a text model (`llama-server --mmproj`). A ViT of two blocks
// over a 32×32 image in 8×8 patches (16 image tokens a picture), then two linear layers into the
// text model's width. Random weights, like bench-small's: the pair is for exactness against
// llama-server and for timing, not for seeing. Every 1-D tensor is F32 (ggml's CPU add and mul
// take no F16 bias), and the tensors mtmd loads as optional but its graph needs are all written.

import { randomHalves } from "./bench";
import { hash32 } from "./prng";
import { constant, encoded } from "./tensor-data";
import { gguf } from "./values";
import type { GgufFile, GgufTensor } from "./writer";

export const PROJECTOR = { imageSize: 32, patchSize: 8, width: 64, heads: 4, feedForward: 256, blocks: 2, hidden: 256 } as const;
const SEED = 0x7151;
/** CLIP's normalization, as LLaVA's projectors carry it. */
const IMAGE_MEAN = [0.48145466, 0.4578275, 0.40821073];
const IMAGE_STD = [0.26862954, 0.26130258, 0.27577711];

/** The file name mtmd's users give a projector beside its model: `mmproj-<model file name>`. */
export const projectorFileName = (modelFileName: string) => `mmproj-${modelFileName}`;

/** The projector for a text model `textWidth` wide (its `embedding_length`), named after it. */
export function projectorGguf(name: string, textWidth: number): GgufFile {
  const { imageSize, patchSize, width, heads, feedForward, blocks, hidden } = PROJECTOR;
  const patches = (imageSize / patchSize) ** 2;
  const random = (tensor: string, shape: number[]): GgufTensor => ({
    name: tensor,
    type: "F32",
    shape,
    data: encoded(
      randomHalves(
        hash32(tensor) ^ SEED,
        shape.reduce((a, d) => a * d, 1),
      ),
      "F32",
    ),
  });
  const filled = (tensor: string, length: number, value: number): GgufTensor => ({
    name: tensor,
    type: "F32",
    shape: [length],
    data: constant(value, length, "F32"),
  });
  const norm = (prefix: string): GgufTensor[] => [filled(`${prefix}.weight`, width, 1), filled(`${prefix}.bias`, width, 0)];
  const linear = (prefix: string, inputs: number, outputs: number): GgufTensor[] => [
    random(`${prefix}.weight`, [inputs, outputs]),
    filled(`${prefix}.bias`, outputs, 0),
  ];
  const block = (i: number): GgufTensor[] => [
    ...["attn_q", "attn_k", "attn_v", "attn_out"].flatMap((kind) => linear(`v.blk.${i}.${kind}`, width, width)),
    ...norm(`v.blk.${i}.ln1`),
    ...norm(`v.blk.${i}.ln2`),
    ...linear(`v.blk.${i}.ffn_up`, width, feedForward),
    ...linear(`v.blk.${i}.ffn_down`, feedForward, width),
  ];
  return {
    metadata: {
      "general.architecture": gguf.string("clip"),
      "general.name": gguf.string(`${name} projector`),
      "clip.has_vision_encoder": gguf.bool(true),
      "clip.projector_type": gguf.string("mlp"),
      "clip.use_gelu": gguf.bool(true),
      "clip.vision.image_size": gguf.u32(imageSize),
      "clip.vision.patch_size": gguf.u32(patchSize),
      "clip.vision.embedding_length": gguf.u32(width),
      "clip.vision.feed_forward_length": gguf.u32(feedForward),
      "clip.vision.projection_dim": gguf.u32(textWidth),
      "clip.vision.block_count": gguf.u32(blocks),
      "clip.vision.attention.head_count": gguf.u32(heads),
      "clip.vision.attention.layer_norm_epsilon": gguf.f32(1e-6),
      "clip.vision.image_mean": gguf.array("f32", IMAGE_MEAN),
      "clip.vision.image_std": gguf.array("f32", IMAGE_STD),
    },
    tensors: [
      random("v.patch_embd.weight", [patchSize, patchSize, 3, width]),
      filled("v.patch_embd.bias", width, 0),
      random("v.position_embd.weight", [width, patches]),
      ...norm("v.pre_ln"),
      ...Array.from({ length: blocks }, (_, i) => block(i)).flat(),
      ...norm("v.post_ln"),
      ...linear("mm.0", width, hidden),
      ...linear("mm.2", hidden, textWidth),
    ],
  };
}
