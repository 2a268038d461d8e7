// Byte sources for GgufTensor.data. Typed arrays are reinterpreted as raw bytes, which is
// GGUF's little-endian layout only on a little-endian host.

import type { TensorType } from "./writer";

if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) {
  throw new Error("the GGUF writer assumes a little-endian host");
}

const CHUNK_ELEMENTS = 1 << 20;

function bytesOf(a: Float32Array | Float16Array | Uint16Array): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/** Writes `values` as `type`, converting to half precision chunk by chunk when needed. */
export function fromFloats(values: Float32Array, type: TensorType): () => Iterable<Uint8Array> {
  if (type === "F32") return () => [bytesOf(values)];
  return function* () {
    const half = new Float16Array(Math.min(CHUNK_ELEMENTS, values.length));
    for (let at = 0; at < values.length; at += half.length) {
      const part = values.subarray(at, at + half.length);
      half.set(part);
      yield bytesOf(half.subarray(0, part.length));
    }
  };
}

/** `count` copies of one value, without allocating the whole tensor. */
export function constant(value: number, count: number, type: TensorType): () => Iterable<Uint8Array> {
  return function* () {
    const n = Math.min(CHUNK_ELEMENTS, count);
    const chunk = type === "F32" ? new Float32Array(n).fill(value) : new Float16Array(n).fill(value);
    for (let left = count; left > 0; left -= n) yield bytesOf(chunk.subarray(0, Math.min(n, left)));
  };
}
