// Byte sources for GgufTensor.data. Typed arrays are reinterpreted as raw bytes, which is
// GGUF's little-endian layout only on a little-endian host.

import { quantizeQ4_0, quantizeQ8_0 } from "./quantize";
import { type TensorType, tensorLayout } from "./writer";

if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) {
  throw new Error("the GGUF writer assumes a little-endian host");
}

/** A multiple of every block size, so only a tensor's last chunk can be short. */
const CHUNK_ELEMENTS = 1 << 20;

export type FloatChunk = Float32Array | Float16Array;

const QUANTIZERS = { Q8_0: quantizeQ8_0, Q4_0: quantizeQ4_0 } as const;

function bytesOf(a: FloatChunk): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/**
 * Writes float chunks as `type`: as they are when already of that type, else converted (F16)
 * or quantized (Q8_0, Q4_0) into buffers reused from chunk to chunk. Chunks of a block type
 * must hold whole blocks.
 */
export function encoded(chunks: () => Iterable<FloatChunk>, type: TensorType): () => Iterable<Uint8Array> {
  return function* () {
    let wide = new Float32Array(0);
    let half = new Float16Array(0);
    let out = new Uint8Array(0);
    for (const chunk of chunks()) {
      if ((type === "F32" && chunk instanceof Float32Array) || (type === "F16" && chunk instanceof Float16Array)) {
        yield bytesOf(chunk);
        continue;
      }
      if (type === "F16") {
        if (half.length < chunk.length) half = new Float16Array(chunk.length);
        half.set(chunk);
        yield bytesOf(half.subarray(0, chunk.length));
        continue;
      }
      if (wide.length < chunk.length) wide = new Float32Array(chunk.length);
      wide.set(chunk);
      const values = wide.subarray(0, chunk.length);
      if (type === "F32") {
        yield bytesOf(values);
        continue;
      }
      const { blockSize, bytesPerBlock } = tensorLayout(type);
      const size = (chunk.length / blockSize) * bytesPerBlock;
      if (out.length < size) out = new Uint8Array(size);
      QUANTIZERS[type](values, out);
      yield out.subarray(0, size);
    }
  };
}

/** Writes `values` as `type`, chunk by chunk. */
export function fromFloats(values: Float32Array, type: TensorType): () => Iterable<Uint8Array> {
  return encoded(function* () {
    for (let at = 0; at < values.length; at += CHUNK_ELEMENTS) yield values.subarray(at, at + CHUNK_ELEMENTS);
  }, type);
}

/** `count` copies of one value, without allocating the whole tensor. */
export function constant(value: number, count: number, type: TensorType): () => Iterable<Uint8Array> {
  return encoded(function* () {
    const chunk = new Float32Array(Math.min(CHUNK_ELEMENTS, count)).fill(value);
    for (let left = count; left > 0; left -= chunk.length) yield chunk.subarray(0, Math.min(chunk.length, left));
  }, type);
}
