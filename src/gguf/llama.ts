// Assembles a llama-layout GGUF (architecture llama, qwen2 or qwen3): the hyperparameters and tokenizer metadata llama.cpp
// reads (src/models/llama.cpp, src/llama-vocab.cpp) and the tensor list it requires. The
// tensor contents come from the caller, one tensor at a time.

import { FILE_TYPES, type FileType, isQuantized, QUANTIZATION_VERSION } from "./file-type";
import { type GgufValue, gguf } from "./values";
import { GGUF_ALIGNMENT, type GgufFile, type GgufTensor } from "./writer";

export interface LlamaHparams {
  readonly nEmbd: number;
  readonly nLayer: number;
  readonly nHead: number;
  readonly nHeadKv: number;
  /** llama.feed_forward_length: llama.cpp aborts the process when it is missing. */
  readonly nFf: number;
  readonly contextLength: number;
  readonly rmsEps: number;
}

/** Tensor names without the `blk.N.` prefix and the `.weight` suffix. */
export type LlamaTensorKind =
  | "token_embd"
  | "output_norm"
  | "output"
  | "attn_norm"
  | "attn_q"
  | "attn_k"
  | "attn_v"
  | "attn_output"
  | "attn_q_norm"
  | "attn_k_norm"
  | "ffn_norm"
  | "ffn_gate"
  | "ffn_up"
  | "ffn_down";

export interface LlamaTensorSpec {
  readonly kind: LlamaTensorKind;
  readonly layer: number | null;
  readonly shape: readonly number[];
}

export type WeightSource = (spec: LlamaTensorSpec) => Pick<GgufTensor, "type" | "data">;

/**
 * llama.cpp architectures of the llama layout: Qwen's read the same keys under their own prefix,
 * and Qwen3 normalizes each head's queries and keys. (Chat format detection checks the
 * architecture: node-llama-cpp only offers a Qwen model its Qwen format.)
 */
export type LlamaArchitecture = "llama" | "qwen2" | "qwen3";

export interface LlamaModel {
  readonly name: string;
  /** Default "llama". */
  readonly architecture?: LlamaArchitecture;
  readonly hparams: LlamaHparams;
  readonly nVocab: number;
  /** `tokenizer.*` keys, see tokenizer.ts. */
  readonly tokenizer: Readonly<Record<string, GgufValue>>;
  /** general.file_type; each tensor's type is the weight source's, see `tensorTypeFor`. */
  readonly fileType: FileType;
  readonly weights: WeightSource;
}

export function llamaTensorSpecs(h: LlamaHparams, nVocab: number, architecture: LlamaArchitecture = "llama"): LlamaTensorSpec[] {
  const headDim = h.nEmbd / h.nHead;
  const kvDim = headDim * h.nHeadKv;
  const specs: LlamaTensorSpec[] = [{ kind: "token_embd", layer: null, shape: [h.nEmbd, nVocab] }];
  for (let layer = 0; layer < h.nLayer; layer++) {
    const blk = (kind: LlamaTensorKind, shape: number[]): LlamaTensorSpec => ({ kind, layer, shape });
    specs.push(
      blk("attn_norm", [h.nEmbd]),
      blk("attn_q", [h.nEmbd, h.nEmbd]),
      blk("attn_k", [h.nEmbd, kvDim]),
      blk("attn_v", [h.nEmbd, kvDim]),
      blk("attn_output", [h.nEmbd, h.nEmbd]),
      ...(architecture === "qwen3" ? [blk("attn_q_norm", [headDim]), blk("attn_k_norm", [headDim])] : []),
      blk("ffn_norm", [h.nEmbd]),
      blk("ffn_gate", [h.nEmbd, h.nFf]),
      blk("ffn_up", [h.nEmbd, h.nFf]),
      blk("ffn_down", [h.nFf, h.nEmbd]),
    );
  }
  specs.push({ kind: "output_norm", layer: null, shape: [h.nEmbd] }, { kind: "output", layer: null, shape: [h.nEmbd, nVocab] });
  return specs;
}

export function parameterCount(h: LlamaHparams, nVocab: number): number {
  return llamaTensorSpecs(h, nVocab).reduce((n, s) => n + s.shape.reduce((a, d) => a * d, 1), 0);
}

function validate(h: LlamaHparams): void {
  const headDim = h.nEmbd / h.nHead;
  // llama.cpp requires n_rot == head size, and RoPE rotates pairs of dimensions.
  if (!Number.isInteger(headDim) || headDim % 2 !== 0) throw new Error(`n_embd ${h.nEmbd} / n_head ${h.nHead} must be an even integer`);
  if (h.nHead % h.nHeadKv !== 0) throw new Error("n_head must be a multiple of n_head_kv");
}

export function llamaGguf(m: LlamaModel): GgufFile {
  const h = m.hparams;
  validate(h);
  const arch = m.architecture ?? "llama";
  const metadata: Record<string, GgufValue> = {
    "general.architecture": gguf.string(arch),
    "general.name": gguf.string(m.name),
    "general.file_type": gguf.u32(FILE_TYPES[m.fileType]),
    ...(isQuantized(m.fileType) ? { "general.quantization_version": gguf.u32(QUANTIZATION_VERSION) } : {}),
    "general.alignment": gguf.u32(GGUF_ALIGNMENT),
    [`${arch}.vocab_size`]: gguf.u32(m.nVocab),
    [`${arch}.context_length`]: gguf.u32(h.contextLength),
    [`${arch}.embedding_length`]: gguf.u32(h.nEmbd),
    [`${arch}.block_count`]: gguf.u32(h.nLayer),
    [`${arch}.feed_forward_length`]: gguf.u32(h.nFf),
    [`${arch}.attention.head_count`]: gguf.u32(h.nHead),
    [`${arch}.attention.head_count_kv`]: gguf.u32(h.nHeadKv),
    [`${arch}.attention.layer_norm_rms_epsilon`]: gguf.f32(h.rmsEps),
    [`${arch}.rope.dimension_count`]: gguf.u32(h.nEmbd / h.nHead),
    [`${arch}.rope.freq_base`]: gguf.f32(10000),
    ...m.tokenizer,
  };
  const tensors = llamaTensorSpecs(h, m.nVocab, arch).map(
    (spec): GgufTensor => ({
      name: spec.layer === null ? `${spec.kind}.weight` : `blk.${spec.layer}.${spec.kind}.weight`,
      shape: spec.shape,
      ...m.weights(spec),
    }),
  );
  return { metadata, tensors };
}
