import { dlopen, FFIType, ptr } from "bun:ffi";
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { FILE_TYPES, tensorTypeFor } from "../../src/gguf/file-type";
import type { FileType } from "../../src/gguf/presets";
import { quantizeQ4_0, quantizeQ8_0 } from "../../src/gguf/quantize";
import { readGgufHeader } from "../../src/gguf/reader";
import { encoded } from "../../src/gguf/tensor-data";
import { GGML_TYPES } from "../../src/gguf/tensor-types";
import { encodeGgufHeader, TENSOR_TYPES } from "../../src/gguf/writer";
import type { Engine, GenerateResult, ReplyPiece } from "../../src/llm/engine";
import { allowSlowTests, presetModel, type Random, testEngine, withSeed } from "../support";

allowSlowTests();

/** One block of 32 values from a sparse list: index → value, the rest `fill`. */
function block(values: Record<number, number>, fill = 0): Float32Array {
  const x = new Float32Array(32).fill(fill);
  for (const [i, v] of Object.entries(values)) x[Number(i)] = v;
  return x;
}

const q8 = (x: Float32Array) => {
  const out = new Uint8Array((x.length / 32) * 34);
  quantizeQ8_0(x, out);
  return out;
};
const q4 = (x: Float32Array) => {
  const out = new Uint8Array((x.length / 32) * 18);
  quantizeQ4_0(x, out);
  return out;
};
const int8s = (out: Uint8Array) => Array.from(new Int8Array(out.buffer, out.byteOffset + 2, 32));
/** Element j of a Q4_0 block: low nibbles hold 0..15, high nibbles 16..31. */
const nibbles = (out: Uint8Array) => Array.from({ length: 32 }, (_, j) => (j < 16 ? out[2 + j]! & 15 : out[2 + j - 16]! >> 4));

// The reference dequantization (ggml-quants.c dequantize_row_q8_0 / _q4_0).
function dequantize(type: "Q8_0" | "Q4_0", bytes: Uint8Array, n: number): Float32Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const y = new Float32Array(n);
  const size = type === "Q8_0" ? 34 : 18;
  for (let b = 0; b < n / 32; b++) {
    const d = view.getFloat16(b * size, true);
    for (let j = 0; j < 32; j++) {
      if (type === "Q8_0") y[b * 32 + j] = view.getInt8(b * size + 2 + j) * d;
      else {
        const byte = bytes[b * size + 2 + (j % 16)]!;
        y[b * 32 + j] = ((j < 16 ? byte & 15 : byte >> 4) - 8) * d;
      }
    }
  }
  return y;
}

describe("Q8_0 blocks as ggml's quantize_row_q8_0_ref", () => {
  test("d = amax / 127 as fp16, values rounded half away from zero", () => {
    // amax 127: d = 1 exactly, so each value is its own rounding.
    const out = q8(block({ 0: 127, 1: -127, 2: 0.5, 3: -0.5, 4: 1.5, 5: -1.5, 6: 2.5, 7: -2.5, 8: 0.49999997, 9: -0.49999997, 10: 3.4 }));
    expect([out[0], out[1]]).toEqual([0x00, 0x3c]); // fp16 1.0
    expect(int8s(out).slice(0, 12)).toEqual([127, -127, 1, -1, 2, -2, 3, -3, 0, 0, 3, 0]);
    // amax 254: d = 2, id = 0.5.
    const two = q8(block({ 0: -254, 1: 3, 2: -3, 3: 1, 4: -1, 5: 100 }));
    expect([two[0], two[1]]).toEqual([0x00, 0x40]); // fp16 2.0
    expect(int8s(two).slice(0, 7)).toEqual([-127, 2, -2, 1, -1, 50, 0]);
  });

  test("a scale that fp16 rounds, and an all-zero block", () => {
    // d = fround(1/127) = 0.0078740157; fp16: 2^-7 · (1 + 8/1024) = 0x2008. The values use the
    // unrounded d: 0.25 · 127 = 31.75 → 32, -0.1 · 127 = -12.7 → -13.
    const out = q8(block({ 0: 1, 1: 0.25, 2: -0.1, 3: -1 }));
    expect([out[0], out[1]]).toEqual([0x08, 0x20]);
    expect(int8s(out).slice(0, 5)).toEqual([127, 32, -13, -127, 0]);
    expect(Array.from(q8(new Float32Array(32)))).toEqual(new Array(34).fill(0));
  });
});

describe("Q4_0 blocks as ggml's quantize_row_q4_0_ref", () => {
  test("d = max / -8 as fp16, nibble j + 8 low and j + 24 high, clamped at 15", () => {
    // The first value of the largest magnitude is -8: d = 1, id = 1, q = min(15, trunc(x + 8.5)).
    const out = q4(block({ 0: -8, 1: 7, 2: 8, 3: -0.5, 4: 0.5, 5: -0.6, 6: 0.49, 16: 6.4, 17: -7.6, 31: 1 }));
    expect([out[0], out[1]]).toEqual([0x00, 0x3c]);
    expect(nibbles(out)).toEqual([0, 15, 15, 8, 9, 7, 8, ...new Array(9).fill(8), 14, 0, ...new Array(13).fill(8), 9]);
    expect(out[2]).toBe(0x00 | (14 << 4)); // elements 0 and 16 share the first byte
    // A positive max gives a negative d (-2, fp16 0xc000): 16 → 0, -16 → 16.5 → clamped 15.
    const neg = q4(block({ 0: 16, 1: -16, 2: 1, 3: 3 }));
    expect([neg[0], neg[1]]).toEqual([0x00, 0xc0]);
    expect(nibbles(neg).slice(0, 5)).toEqual([0, 15, 8, 7, 8]);
  });

  test("the first of equal magnitudes sets the sign; sums are rounded to float before truncation", () => {
    const first = q4(block({ 0: 4, 1: -8, 2: 8 })); // -8 comes first: d = 1, and 8 clamps to 15
    expect([first[0], first[1]]).toEqual([0x00, 0x3c]);
    expect(nibbles(first).slice(0, 3)).toEqual([12, 0, 15]);
    // 0.49999997 + 8.5 is 8.99999997 in double but 9 in single precision, as ggml computes it.
    expect(nibbles(q4(block({ 0: -8, 1: 0.49999997 })))[1]).toBe(9);
  });

  test("an all-zero block has d = 0 / -8 = -0 (fp16 0x8000) and every nibble 8", () => {
    expect(Array.from(q4(new Float32Array(32)))).toEqual([0x00, 0x80, ...new Array(16).fill(0x88)]);
  });
});

describe("round trip", () => {
  function randomValues(random: Random, n: number): Float32Array {
    // Blocks of different scales (d stays a normal fp16), some with a few outliers, some constant.
    const x = new Float32Array(n);
    for (let b = 0; b < n / 32; b++) {
      const scale = 10 ** random.int(-1, 3);
      const constant = random.int(0, 9) === 0;
      for (let j = 0; j < 32; j++) x[b * 32 + j] = constant ? scale : (random.next() * 2 - 1) * scale * (random.int(0, 15) === 0 ? 8 : 1);
    }
    return x;
  }

  test(
    "Q8_0 is within half a step (+ the fp16 rounding of d), Q4_0 within half a step except the clamped top",
    withSeed(async (random) => {
      const n = 32 * 4096;
      const x = randomValues(random, n);
      for (const type of ["Q8_0", "Q4_0"] as const) {
        const bytes = type === "Q8_0" ? q8(x) : q4(x);
        const y = dequantize(type, bytes, n);
        for (let b = 0; b < n / 32; b++) {
          const values = x.subarray(b * 32, b * 32 + 32);
          const amax = Math.max(...values.map(Math.abs));
          const step = amax / (type === "Q8_0" ? 127 : 8);
          // fp16 keeps 11 significant bits: d is off by 2^-11 relative at most, times |q| ≤ 127
          // or 8; single-precision products add well under 1e-4 of a step.
          const slack = (type === "Q8_0" ? 127 : 8) * step * 2 ** -11 + 1e-4 * step;
          for (let j = 0; j < 32; j++) {
            const err = Math.abs(y[b * 32 + j]! - values[j]!);
            // Q4_0's levels run from -8 to 7 steps: the top value of the other sign lands on 7.
            const bound = type === "Q4_0" && Math.abs(values[j]!) > 7.5 * step ? step : step / 2;
            if (err > bound + slack) throw new Error(`${type} block ${b} element ${j}: ${values[j]} came back as ${y[b * 32 + j]}`);
          }
        }
      }
    }),
  );
});

/** node-llama-cpp's own ggml, when its prebuilt for this platform is installed. */
function ggmlBase(): string | undefined {
  const platform = `${process.platform}-${process.arch}`;
  const extension = process.platform === "darwin" ? "dylib" : "so";
  const path = join(import.meta.dir, "../../node_modules/@node-llama-cpp", platform, "bins", platform, `libggml-base.${extension}`);
  return existsSync(path) ? path : undefined;
}

describe("against ggml itself", () => {
  const path = ggmlBase();
  test.skipIf(path === undefined)(
    "random blocks quantize to the bytes of ggml's quantize_row_*_ref",
    withSeed(async (random) => {
      const lib = dlopen(path!, {
        quantize_row_q8_0_ref: { args: [FFIType.ptr, FFIType.ptr, FFIType.i64], returns: FFIType.void },
        quantize_row_q4_0_ref: { args: [FFIType.ptr, FFIType.ptr, FFIType.i64], returns: FFIType.void },
      });
      try {
        const n = 32 * 20_000;
        const x = new Float32Array(n);
        const bits = new Uint32Array(x.buffer);
        for (let i = 0; i < n; i++) {
          switch (Math.floor(i / 32) % 4) {
            case 0:
              x[i] = random.next() * 2 - 1;
              break;
            case 1:
              x[i] = random.int(-20, 20) / 2;
              break; // ties
            case 2:
              x[i] = random.int(0, 3) === 0 ? (random.next() - 0.5) * 1e-6 : 0;
              break;
            default: // any finite float
              do bits[i] = Math.floor(random.next() * 2 ** 32);
              while (!Number.isFinite(x[i]!) || Math.abs(x[i]!) > 1e30);
          }
        }
        for (const [type, mine] of [
          ["q8_0", q8],
          ["q4_0", q4],
        ] as const) {
          const theirs = new Uint8Array((n / 32) * (type === "q8_0" ? 34 : 18));
          lib.symbols[`quantize_row_${type}_ref`](ptr(x), ptr(theirs), n);
          expect(Buffer.from(mine(x)).equals(Buffer.from(theirs))).toBe(true);
        }
      } finally {
        lib.close();
      }
    }),
  );
});

test("the writer's block layouts are ggml's", () => {
  expect(GGML_TYPES.get(TENSOR_TYPES.Q8_0)).toMatchObject({ name: "Q8_0", blockSize: 32, bytesPerBlock: 34 });
  expect(GGML_TYPES.get(TENSOR_TYPES.Q4_0)).toMatchObject({ name: "Q4_0", blockSize: 32, bytesPerBlock: 18 });
});

test("the writer refuses rows that are not whole blocks", () => {
  const tensor = { name: "w", type: "Q8_0" as const, shape: [48, 2], data: () => [] };
  expect(() => encodeGgufHeader({ metadata: {}, tensors: [tensor] })).toThrow("tensor w: rows of 48 values are not whole Q8_0 blocks of 32");
  expect(tensorTypeFor("Q4_0", { kind: "ffn_down", shape: [48, 2] })).toBe("F16"); // llama-quantize's fallback
});

test("F16 chunks quantize like their F32 values, in reused buffers", () => {
  const halves = Float16Array.from({ length: 64 }, (_, i) => (i - 30) / 7);
  const chunks = Array.from(encoded(() => [halves.subarray(0, 32), halves.subarray(32)], "Q8_0")(), (c) => Array.from(c));
  expect(chunks.flat()).toEqual(Array.from(q8(Float32Array.from(halves))));
});

describe("bench-small quantized", () => {
  // sha256 of the whole file; a change to the writer, the weights or the quantizers shows here.
  const SHA256: Partial<Record<FileType, string>> = {
    Q8_0: "2e35d170a712be08d96841b1b900c3b712786f97f7d34aee1c43a007d3519293",
    Q4_0: "e70bf33192f130c6cdf2a06b23029e5df1fc57dd70f979b6dd8b589ffa1997ed",
  };
  let engine: Engine | undefined;
  afterAll(() => engine?.close());

  for (const fileType of ["Q8_0", "Q4_0"] as const) {
    test(`${fileType}: deterministic, laid out as llama-quantize does, and replies in node-llama-cpp`, async () => {
      const path = await presetModel("bench-small", fileType);
      expect(new Bun.CryptoHasher("sha256").update(readFileSync(path)).digest("hex")).toBe(SHA256[fileType]!);

      const header = readGgufHeader(path);
      expect(header.metadata["general.file_type"]).toEqual({ type: "u32", value: FILE_TYPES[fileType] });
      expect(header.metadata["general.quantization_version"]).toEqual({ type: "u32", value: 2 });
      for (const t of header.tensors) {
        const expected = t.shape.length === 1 ? "F32" : t.name === "output.weight" ? "Q8_0" : fileType;
        expect(`${t.name} ${GGML_TYPES.get(t.typeId)!.name}`).toBe(`${t.name} ${expected}`);
      }

      engine = await testEngine({ preset: "bench-small", fileType, parallel: 1, contextSize: 256 });
      const gen = engine.generate({ cacheScope: "test", history: [{ role: "user", content: "Hello there" }], temperature: 0, maxTokens: 8 });
      let step: IteratorResult<ReplyPiece, GenerateResult>;
      do step = await gen.next();
      while (!step.done);
      // Random weights: the text is noise, but eight tokens come out.
      expect(step.value).toMatchObject({ finishReason: "length", completionTokens: 8 });
      await engine.close();
      engine = undefined;
    });
  }
});
