// What a GGUF header's numbers mean: ggml tensor types with their storage layout, and
// llama.cpp's names for `general.file_type`. Both mirror the llama.cpp bundled with
// node-llama-cpp (ggml/include/ggml.h `enum ggml_type`, ggml/src/ggml.c `type_traits`,
// include/llama.h `enum llama_ftype`); block byte sizes are sizeof(block_*) from ggml-common.h.

export interface GgmlType {
  readonly name: string;
  /** Elements per block; a row's length must be a multiple of it. */
  readonly blockSize: number;
  readonly bytesPerBlock: number;
}

const type = (name: string, blockSize: number, bytesPerBlock: number): GgmlType => ({ name, blockSize, bytesPerBlock });

/** By ggml_type id. Ids 4, 5 and 31–33, 36–38 were removed from ggml and are unknown here too. */
export const GGML_TYPES: ReadonlyMap<number, GgmlType> = new Map([
  [0, type("F32", 1, 4)],
  [1, type("F16", 1, 2)],
  [2, type("Q4_0", 32, 18)],
  [3, type("Q4_1", 32, 20)],
  [6, type("Q5_0", 32, 22)],
  [7, type("Q5_1", 32, 24)],
  [8, type("Q8_0", 32, 34)],
  [9, type("Q8_1", 32, 36)],
  [10, type("Q2_K", 256, 84)],
  [11, type("Q3_K", 256, 110)],
  [12, type("Q4_K", 256, 144)],
  [13, type("Q5_K", 256, 176)],
  [14, type("Q6_K", 256, 210)],
  [15, type("Q8_K", 256, 292)],
  [16, type("IQ2_XXS", 256, 66)],
  [17, type("IQ2_XS", 256, 74)],
  [18, type("IQ3_XXS", 256, 98)],
  [19, type("IQ1_S", 256, 50)],
  [20, type("IQ4_NL", 32, 18)],
  [21, type("IQ3_S", 256, 110)],
  [22, type("IQ2_S", 256, 82)],
  [23, type("IQ4_XS", 256, 136)],
  [24, type("I8", 1, 1)],
  [25, type("I16", 1, 2)],
  [26, type("I32", 1, 4)],
  [27, type("I64", 1, 8)],
  [28, type("F64", 1, 8)],
  [29, type("IQ1_M", 256, 56)],
  [30, type("BF16", 1, 2)],
  [34, type("TQ1_0", 256, 54)],
  [35, type("TQ2_0", 256, 66)],
  [39, type("MXFP4", 32, 17)],
  [40, type("NVFP4", 64, 36)],
  [41, type("Q1_0", 128, 18)],
  [42, type("Q2_0", 64, 18)],
]);

/** `general.file_type` (llama_ftype) as llama-quantize names it, e.g. in file names. */
export const FILE_TYPE_NAMES: ReadonlyMap<number, string> = new Map([
  [0, "F32"],
  [1, "F16"],
  [2, "Q4_0"],
  [3, "Q4_1"],
  [7, "Q8_0"],
  [8, "Q5_0"],
  [9, "Q5_1"],
  [10, "Q2_K"],
  [11, "Q3_K_S"],
  [12, "Q3_K_M"],
  [13, "Q3_K_L"],
  [14, "Q4_K_S"],
  [15, "Q4_K_M"],
  [16, "Q5_K_S"],
  [17, "Q5_K_M"],
  [18, "Q6_K"],
  [19, "IQ2_XXS"],
  [20, "IQ2_XS"],
  [21, "Q2_K_S"],
  [22, "IQ3_XS"],
  [23, "IQ3_XXS"],
  [24, "IQ1_S"],
  [25, "IQ4_NL"],
  [26, "IQ3_S"],
  [27, "IQ3_M"],
  [28, "IQ2_S"],
  [29, "IQ2_M"],
  [30, "IQ4_XS"],
  [31, "IQ1_M"],
  [32, "BF16"],
  [36, "TQ1_0"],
  [37, "TQ2_0"],
  [38, "MXFP4_MOE"],
  [39, "NVFP4"],
  [40, "Q1_0"],
  [41, "Q2_0"],
]);
