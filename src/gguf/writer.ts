// GGUF v3 writer (format: ggml/src/gguf.cpp). The header is built in memory; tensor data is
// pulled chunk by chunk from each tensor's source and written straight to the file, so a
// 200 MB model never exists in memory. Nothing time- or host-dependent is written: the same
// inputs give the same bytes.

import { open } from "node:fs/promises";
import { ByteBuilder } from "./bytes";
import { GGML_TYPES, type GgmlType } from "./tensor-types";
import { GGUF_VALUE_TYPE, type GgufValue } from "./values";

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
export const GGUF_VERSION = 3;
export const GGUF_ALIGNMENT = 32; // llama.cpp's default when general.alignment is absent

/** ggml_type ids (ggml/include/ggml.h) of the types we write. */
export const TENSOR_TYPES = { F32: 0, F16: 1, Q4_0: 2, Q8_0: 8 } as const;
export type TensorType = keyof typeof TENSOR_TYPES;

export function tensorLayout(type: TensorType): GgmlType {
  return GGML_TYPES.get(TENSOR_TYPES[type])!;
}

export interface GgufTensor {
  readonly name: string;
  readonly type: TensorType;
  /** ggml order: shape[0] is the contiguous (row) dimension, as in `{n_embd, n_vocab}`. */
  readonly shape: readonly number[];
  /**
   * Yields the tensor's bytes in order. Each chunk is written before the next is requested,
   * so a source may refill and re-yield one buffer.
   */
  readonly data: () => Iterable<Uint8Array>;
}

export interface GgufFile {
  /** Written in insertion order. */
  readonly metadata: Readonly<Record<string, GgufValue>>;
  readonly tensors: readonly GgufTensor[];
}

export function tensorByteLength(t: Pick<GgufTensor, "type" | "shape">): number {
  const { blockSize, bytesPerBlock } = tensorLayout(t.type);
  return (t.shape.reduce((n, d) => n * d, 1) / blockSize) * bytesPerBlock;
}

function alignUp(n: number): number {
  return Math.ceil(n / GGUF_ALIGNMENT) * GGUF_ALIGNMENT;
}

function writeValue(b: ByteBuilder, v: GgufValue): void {
  switch (v.type) {
    case "u8":
      return b.u8(v.value);
    case "i8":
      return b.i8(v.value);
    case "u16":
      return b.u16(v.value);
    case "i16":
      return b.i16(v.value);
    case "u32":
      return b.u32(v.value);
    case "i32":
      return b.i32(v.value);
    case "f32":
      return b.f32(v.value);
    case "f64":
      return b.f64(v.value);
    case "u64":
      return b.u64(v.value);
    case "i64":
      return b.i64(v.value);
    case "bool":
      return b.u8(v.value ? 1 : 0);
    case "string":
      return b.string(v.value);
    case "array": {
      b.u32(GGUF_VALUE_TYPE[v.itemType]);
      b.u64(v.items.length);
      for (const item of v.items) {
        writeValue(b, v.itemType === "array" ? (item as GgufValue) : ({ type: v.itemType, value: item } as GgufValue));
      }
      return;
    }
  }
}

/** Everything before the tensor data: header, metadata, tensor infos, padding to alignment. */
export function encodeGgufHeader(file: GgufFile): Uint8Array {
  const names = new Set<string>();
  for (const t of file.tensors) {
    if (names.has(t.name)) throw new Error(`duplicate tensor name ${t.name}`);
    names.add(t.name);
    if (t.shape.length < 1 || t.shape.length > 4 || t.shape.some((d) => !Number.isInteger(d) || d < 1)) {
      throw new Error(`invalid shape for tensor ${t.name}: [${t.shape.join(", ")}]`);
    }
    // Blocks never straddle rows: ggml addresses a row by its byte offset.
    const { blockSize } = tensorLayout(t.type);
    if (t.shape[0]! % blockSize !== 0) {
      throw new Error(`tensor ${t.name}: rows of ${t.shape[0]} values are not whole ${t.type} blocks of ${blockSize}`);
    }
  }
  const alignment = file.metadata["general.alignment"];
  if (alignment !== undefined && !(alignment.type === "u32" && alignment.value === GGUF_ALIGNMENT)) {
    throw new Error(`this writer only produces ${GGUF_ALIGNMENT}-byte alignment`);
  }

  const b = new ByteBuilder();
  b.u32(GGUF_MAGIC);
  b.u32(GGUF_VERSION);
  b.u64(file.tensors.length);
  const entries = Object.entries(file.metadata);
  b.u64(entries.length);
  for (const [key, value] of entries) {
    b.string(key);
    b.u32(GGUF_VALUE_TYPE[value.type]);
    writeValue(b, value);
  }
  let offset = 0;
  for (const t of file.tensors) {
    b.string(t.name);
    b.u32(t.shape.length);
    for (const d of t.shape) b.u64(d);
    b.u32(TENSOR_TYPES[t.type]);
    b.u64(offset);
    offset = alignUp(offset + tensorByteLength(t));
  }
  b.padTo(GGUF_ALIGNMENT);
  return b.toBytes();
}

/** Writes `file` to `path` (truncating it). Callers wanting atomicity write to a temp path and rename. */
export async function writeGguf(path: string, file: GgufFile): Promise<void> {
  const handle = await open(path, "w");
  try {
    let position = 0;
    const put = async (bytes: Uint8Array): Promise<void> => {
      let done = 0;
      while (done < bytes.length) {
        const { bytesWritten } = await handle.write(bytes, done, bytes.length - done, position + done);
        done += bytesWritten;
      }
      position += bytes.length;
    };

    await put(encodeGgufHeader(file));
    const zeros = new Uint8Array(GGUF_ALIGNMENT);
    for (const t of file.tensors) {
      const expected = tensorByteLength(t);
      let written = 0;
      for (const chunk of t.data()) {
        written += chunk.length;
        if (written > expected) break;
        await put(chunk);
      }
      if (written !== expected) {
        throw new Error(`tensor ${t.name}: source gave ${written} bytes, shape needs ${expected}`);
      }
      await put(zeros.subarray(0, alignUp(expected) - expected));
    }
  } finally {
    await handle.close();
  }
}
