// GGUF metadata values, tagged with their on-disk type so that writing is unambiguous
// (a JS number alone cannot say whether it is a u8, an i32 or an f32).

/** Type ids as stored in the file (ggml/include/gguf.h `enum gguf_type`). */
export const GGUF_VALUE_TYPE = {
  u8: 0,
  i8: 1,
  u16: 2,
  i16: 3,
  u32: 4,
  i32: 5,
  f32: 6,
  bool: 7,
  string: 8,
  array: 9,
  u64: 10,
  i64: 11,
  f64: 12,
} as const;

export type GgufValueType = keyof typeof GGUF_VALUE_TYPE;
type NumberType = "u8" | "i8" | "u16" | "i16" | "u32" | "i32" | "f32" | "f64";
type BigIntType = "u64" | "i64";

export type GgufScalar =
  | { readonly type: NumberType; readonly value: number }
  | { readonly type: BigIntType; readonly value: bigint }
  | { readonly type: "bool"; readonly value: boolean }
  | { readonly type: "string"; readonly value: string };

interface ItemOf {
  u8: number;
  i8: number;
  u16: number;
  i16: number;
  u32: number;
  i32: number;
  f32: number;
  f64: number;
  u64: bigint;
  i64: bigint;
  bool: boolean;
  string: string;
  array: GgufArray;
}

/** Arrays are homogeneous; the spec allows arrays of arrays (llama.cpp itself rejects them). */
export type GgufArray = {
  [K in GgufValueType]: { readonly type: "array"; readonly itemType: K; readonly items: readonly ItemOf[K][] };
}[GgufValueType];

export type GgufValue = GgufScalar | GgufArray;

export const gguf = {
  u8: (value: number): GgufValue => ({ type: "u8", value }),
  i8: (value: number): GgufValue => ({ type: "i8", value }),
  u16: (value: number): GgufValue => ({ type: "u16", value }),
  i16: (value: number): GgufValue => ({ type: "i16", value }),
  u32: (value: number): GgufValue => ({ type: "u32", value }),
  i32: (value: number): GgufValue => ({ type: "i32", value }),
  f32: (value: number): GgufValue => ({ type: "f32", value }),
  f64: (value: number): GgufValue => ({ type: "f64", value }),
  u64: (value: bigint): GgufValue => ({ type: "u64", value }),
  i64: (value: bigint): GgufValue => ({ type: "i64", value }),
  bool: (value: boolean): GgufValue => ({ type: "bool", value }),
  string: (value: string): GgufValue => ({ type: "string", value }),
  array: <K extends GgufValueType>(itemType: K, items: readonly ItemOf[K][]): GgufValue => ({ type: "array", itemType, items }) as GgufArray,
};
