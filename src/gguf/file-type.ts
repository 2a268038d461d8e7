// A file type (`general.file_type`, llama_ftype) decides the ggml type of each tensor. For the
// types this writer produces, the choice is llama-quantize's (src/llama-quant.cpp), so a
// generated quantized model is laid out like one a user quantized from the F16 file.

import type { LlamaTensorSpec } from "./llama";
import { type TensorType, tensorLayout } from "./writer";

/** llama_ftype ids (include/llama.h). */
export const FILE_TYPES = { F32: 0, F16: 1, Q4_0: 2, Q8_0: 7 } as const;
export type FileType = keyof typeof FILE_TYPES;

/** ggml's GGML_QNT_VERSION, which llama-quantize records in every file it writes. */
export const QUANTIZATION_VERSION = 2;

export const isQuantized = (fileType: FileType): boolean => fileType === "Q4_0" || fileType === "Q8_0";

export function tensorTypeFor(fileType: FileType, spec: Pick<LlamaTensorSpec, "kind" | "shape">): TensorType {
  // Vectors (the norms) stay F32: llama-quantize only quantizes matrices.
  if (fileType === "F32" || spec.shape.length < 2) return "F32";
  if (fileType === "F16") return "F16";
  // llama-quantize gives output.weight more bits than a Q4_0 file's other matrices (Q6_K);
  // Q8_0 is the nearest type written here, as `llama-quantize --output-tensor-type q8_0` does.
  const wanted: TensorType = spec.kind === "output" ? "Q8_0" : fileType;
  // Rows that are not whole blocks fall back to F16, as in llama-quantize's tensor_type_fallback.
  return spec.shape[0]! % tensorLayout(wanted).blockSize === 0 ? wanted : "F16";
}
