// ggml's Q8_0 and Q4_0 blocks, bit for bit as `quantize_row_q8_0_ref` and `quantize_row_q4_0_ref`
// (ggml/src/ggml-quants.c) make them, which is what llama-quantize writes without an imatrix.
// ggml computes in single precision: every intermediate result goes through Math.fround
// (a double result of one +, *, / on floats rounds to the same float as the float operation).
// Block layouts (ggml-common.h): Q8_0 = fp16 scale d, 32 × int8; Q4_0 = fp16 scale d,
// 16 bytes whose low nibbles hold elements 0..15 and high nibbles elements 16..31, offset by 8.

export const QK = 32;
export const Q8_0_BLOCK_BYTES = 2 + QK;
export const Q4_0_BLOCK_BYTES = 2 + QK / 2;

const { fround, abs, min } = Math;

// fp16 scale: Float16Array stores with IEEE round-to-nearest-even, as ggml_compute_fp32_to_fp16.
const half = new Float16Array(1);
const halfBytes = new Uint8Array(half.buffer);

function putHalf(out: Uint8Array, at: number, value: number): void {
  half[0] = value;
  out[at] = halfBytes[0]!;
  out[at + 1] = halfBytes[1]!;
}

function blockCount(x: Float32Array, out: Uint8Array, blockBytes: number): number {
  if (x.length % QK !== 0) throw new Error(`${x.length} values are not whole blocks of ${QK}`);
  const blocks = x.length / QK;
  if (out.length < blocks * blockBytes) throw new Error(`output holds ${out.length} bytes, ${blocks} blocks need ${blocks * blockBytes}`);
  return blocks;
}

/** Writes `x.length / 32` Q8_0 blocks to the start of `out`. */
export function quantizeQ8_0(x: Float32Array, out: Uint8Array): void {
  const blocks = blockCount(x, out, Q8_0_BLOCK_BYTES);
  for (let b = 0, i = 0, o = 0; b < blocks; b++, i += QK, o += Q8_0_BLOCK_BYTES) {
    let amax = 0;
    for (let j = 0; j < QK; j++) {
      const a = abs(x[i + j]!);
      if (a > amax) amax = a;
    }
    const d = fround(amax / 127);
    const id = d ? fround(1 / d) : 0;
    putHalf(out, o, d);
    for (let j = 0; j < QK; j++) {
      const v = fround(x[i + j]! * id);
      // roundf: halves away from zero. v ± 0.5 is exact in double, and `| 0` truncates.
      out[o + 2 + j] = (v + (v < 0 ? -0.5 : 0.5)) | 0;
    }
  }
}

/** Writes `x.length / 32` Q4_0 blocks to the start of `out`. */
export function quantizeQ4_0(x: Float32Array, out: Uint8Array): void {
  const blocks = blockCount(x, out, Q4_0_BLOCK_BYTES);
  for (let b = 0, i = 0, o = 0; b < blocks; b++, i += QK, o += Q4_0_BLOCK_BYTES) {
    // The signed value of largest magnitude (the first of equals) maps to -8, the only
    // level without a positive twin; an all-zero block gets d = 0 / -8 = -0.
    let amax = 0;
    let max = 0;
    for (let j = 0; j < QK; j++) {
      const v = x[i + j]!;
      if (amax < abs(v)) {
        amax = abs(v);
        max = v;
      }
    }
    const d = fround(max / -8);
    const id = d ? fround(1 / d) : 0;
    putHalf(out, o, d);
    for (let j = 0; j < QK / 2; j++) {
      // (int8_t) truncates, as `| 0` does; the sums are never below 0. The float sum must be
      // rounded first: 0.49999997 + 8.5 is 9 in single precision.
      const lo = min(15, fround(fround(x[i + j]! * id) + 8.5) | 0);
      const hi = min(15, fround(fround(x[i + QK / 2 + j]! * id) + 8.5) | 0);
      out[o + 2 + j] = lo | (hi << 4);
    }
  }
}
