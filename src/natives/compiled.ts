/**
 * The recipe of the locally compiled natives (`bun run natives`, and `bun run build` when they are
 * missing) and where they are kept: outside the checkout, in
 * `$XDG_CACHE_HOME/parley/compiled-natives/<node-llama-cpp version>-<recipe hash>/linux-x64/`, so a
 * fresh clone, `git clean` or another worktree reuses them, and a changed recipe never picks up a
 * stale build. Not under `…/parley/natives/`: the executable removes every other build's directory
 * there (src/natives/cache.ts).
 *
 * Portable like the npm prebuilt: ggml picks the best CPU variant at run time (GGML_BACKEND_DL),
 * never -march=native. Which variants: a baseline any x86-64 CPU loads, AVX2 (Haswell, 2013+),
 * AVX-512 (Skylake-X and later Intel servers) and AVX-512 with VNNI/BF16/VBMI (AMD Zen 4+; Intel
 * Sapphire Rapids+ picks it too). CPUs that ggml's other variants target (pre-AVX2 steps, Alder
 * Lake's AVX-VNNI, Ice Lake, AMX) load the best of these they support.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { userCacheDir } from "./cache";
import { NODE_LLAMA_CPP_VERSION } from "./version";

export const CPU_VARIANTS = ["x64", "haswell", "skylakex", "zen4"] as const;

/** The cmake hook that keeps only CPU_VARIANTS out of GGML_CPU_ALL_VARIANTS' list. */
export const CPU_VARIANTS_HOOK = join(import.meta.dir, "cpu-variants.cmake");

/**
 * The cmake hook that links decode-thread.cpp into the addon (every decode on one thread) and
 * decode-steps.cpp (the running replies decoded and sampled there for several steps a call).
 */
export const DECODE_THREAD_HOOK = join(import.meta.dir, "decode-thread.cmake");
const HOOK_SOURCES = [
  "decode-thread.h",
  "decode-thread.cpp",
  "decode-steps.cpp",
  "lookup-draft.h",
  "addon-methods.h",
  "token-logprobs.cpp",
  "pooled-embeddings.cpp",
  "sequence-state.cpp",
  "infill-sampler.cpp",
  "vision.cpp",
].map((name) => join(import.meta.dir, name));

/**
 * Symbols only an addon built with the decode-thread hook has: its decode thread, its decodeSteps
 * method, its quiet log and its record of pending shifts.
 */
export const HOOK_SYMBOLS = [
  "__wrap_llama_decode",
  "__wrap_napi_define_class",
  "__wrap_llama_log_set",
  "__wrap_llama_memory_seq_add",
  "__wrap_llama_memory_seq_div",
];

export const CMAKE_OPTIONS: Readonly<Record<string, string>> = {
  GGML_NATIVE: "OFF",
  GGML_CPU_ALL_VARIANTS: "ON",
  GGML_BACKEND_DL: "ON",
  GGML_OPENMP: "ON",
  CMAKE_PROJECT_ggml_INCLUDE: CPU_VARIANTS_HOOK,
  CMAKE_PROJECT_INCLUDE: DECODE_THREAD_HOOK,
  PARLEY_CPU_VARIANTS: CPU_VARIANTS.join(","),
  // decode-thread.cmake refuses to configure the addon of another node-llama-cpp.
  PARLEY_NODE_LLAMA_CPP_VERSION: NODE_LLAMA_CPP_VERSION,
};

/** node-llama-cpp's name for the folder of a CPU build, inside the directory it calls `binsDir`. */
export const PLATFORM_FOLDER = "linux-x64";

/**
 * The ARM64 build (`bun run natives --target linux-arm64`), cross-compiled with Debian's
 * `g++-aarch64-linux-gnu` through node-llama-cpp's own toolchain file: the same recipe for ggml's ARM
 * CPU variants, kept beside the x86-64 build in the same `binsDir`, in the folder node-llama-cpp reads
 * on an ARM64 Linux. Which variants: a baseline any ARMv8-A loads (Cortex-A72, Raspberry Pi 4), dot
 * product and FP16 (Cortex-A76, Neoverse N1: Raspberry Pi 5, Graviton2, Ampere Altra), SVE with int8
 * matmul (Neoverse V1: Graviton3), and SVE2 (Neoverse V2: Graviton4, Grace). The SME variants need a
 * newer GCC than Debian 12's. Its variants are recorded in ARM64_RECIPE_FILE there, since the
 * directory's name hashes the x86-64 recipe only.
 */
export const ARM64_FOLDER = "linux-arm64";
export const ARM64_CPU_VARIANTS = ["armv8.0_1", "armv8.2_2", "armv8.6_1", "armv8.6_2"] as const;
export const ARM64_RECIPE_FILE = "parley-arm64.json";
export const ARM64_CMAKE_OPTIONS: Readonly<Record<string, string>> = { ...CMAKE_OPTIONS, PARLEY_CPU_VARIANTS: ARM64_CPU_VARIANTS.join(",") };
/** The cross compiler's prefix: `<prefix>g++`, `<prefix>nm`. */
export const ARM64_TOOL_PREFIX = "aarch64-linux-gnu-";

/** What an executable runs on: this machine's kind, or ARM64 Linux (cross-compiled). */
export type Target = "linux-x64" | "linux-arm64";

/** A command line's `--target`: linux-x64 (the default) or linux-arm64. */
export function targetOf(flags: { target?: string | undefined }): Target {
  const target = flags.target ?? PLATFORM_FOLDER;
  if (target !== "linux-x64" && target !== "linux-arm64") throw new Error(`--target takes linux-x64 or linux-arm64, not "${target}"`);
  return target;
}

/**
 * The CUDA build (`bun run natives --gpu cuda`): the same recipe plus ggml's CUDA backend, a plugin
 * (`libggml-cuda.so`) loaded beside the CPU variants. It lives in the same `binsDir`, in the folder
 * node-llama-cpp reads for `gpu: "cuda"`, so a checkout or an executable holds both and picks one at
 * start. Its own choices are recorded in CUDA_RECIPE_FILE there, since the directory's name hashes
 * the CPU recipe only.
 */
export const CUDA_FOLDER = "linux-x64-cuda";
export const CUDA_RECIPE_FILE = "parley-cuda.json";

export interface CudaRecipe {
  /** CMAKE_CUDA_ARCHITECTURES, e.g. `90` for Hopper alone. */
  architectures: string;
  /**
   * Whether ggml may use CUDA's virtual memory management for its pool, which links the driver's
   * libcuda.so: a toolkit without the driver's stub library (a compiler-only install) cannot.
   */
  vmm: boolean;
}

/**
 * The default architectures: each one adds its kernels' compile time and size, so the common
 * server and workstation GPUs of CUDA 13 get machine code (Ampere, Ada, Hopper, Blackwell) and
 * anything newer JIT-compiles Hopper's PTX.
 */
export const DEFAULT_CUDA_ARCHITECTURES = "80-real;86-real;89-real;90;120a-real";

/** A command line's `--gpu cuda [--cuda-arch <list>]`: the CUDA architectures to build for, or none. */
export function cudaArchitecturesOf(flags: { gpu?: string | undefined; "cuda-arch"?: string | undefined }): string | undefined {
  if (flags.gpu !== undefined && flags.gpu !== "cuda") throw new Error(`--gpu takes "cuda", not "${flags.gpu}"`);
  if (flags["cuda-arch"] !== undefined && flags.gpu === undefined) throw new Error("--cuda-arch needs --gpu cuda");
  return flags.gpu === undefined ? undefined : (flags["cuda-arch"] ?? DEFAULT_CUDA_ARCHITECTURES);
}

export function cudaCmakeOptions({ architectures, vmm }: CudaRecipe): Record<string, string> {
  return {
    ...CMAKE_OPTIONS,
    GGML_CUDA: "ON",
    CMAKE_CUDA_ARCHITECTURES: architectures,
    GGML_CUDA_NO_VMM: vmm ? "OFF" : "ON",
    // One GPU per server: NCCL would add a runtime dependency and nothing to use it.
    GGML_CUDA_NCCL: "OFF",
  };
}

/**
 * The `binsDir` of the compiled natives for this recipe (the build itself is in its
 * `linux-x64/`). The hash covers the options (not the hooks' paths) and the hooks' text.
 */
export function compiledNativesDir(nodeLlamaCppVersion: string, env: Record<string, string | undefined> = Bun.env): string {
  const hasher = new Bun.CryptoHasher("sha256");
  const { CMAKE_PROJECT_ggml_INCLUDE: _variants, CMAKE_PROJECT_INCLUDE: _decode, ...options } = CMAKE_OPTIONS;
  hasher.update(JSON.stringify(options));
  for (const file of [CPU_VARIANTS_HOOK, DECODE_THREAD_HOOK, ...HOOK_SOURCES]) hasher.update(readFileSync(file));
  return join(userCacheDir(env), "parley", "compiled-natives", `${nodeLlamaCppVersion}-${hasher.digest("hex").slice(0, 16)}`);
}
