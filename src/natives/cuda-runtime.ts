/**
 * Whether this machine has what the CUDA natives load, asked before node-llama-cpp tries (which,
 * without them, says only that no binary was found): the NVIDIA driver's `libcuda.so.1` and CUDA
 * 13's runtime and cuBLAS, which `libggml-cuda.so` links. Each is opened as the loader would find
 * it (its cache, LD_LIBRARY_PATH) and closed at once.
 */
import { dlopen } from "bun:ffi";

const REQUIRED: readonly { library: string; symbol: string; what: string }[] = [
  { library: "libcuda.so.1", symbol: "cuInit", what: "no NVIDIA driver is installed" },
  { library: "libcudart.so.13", symbol: "cudaGetDeviceCount", what: "CUDA 13's runtime is not installed" },
  { library: "libcublas.so.13", symbol: "cublasCreate_v2", what: "CUDA 13's cuBLAS is not installed" },
];

/** Why the CUDA natives cannot load here, or undefined when their libraries are all found. */
export function missingCudaLibraries(): string | undefined {
  for (const { library, symbol, what } of REQUIRED) {
    try {
      dlopen(library, { [symbol]: { args: [], returns: "i32" } }).close();
    } catch {
      return `${what} (${library} not found)`;
    }
  }
  return undefined;
}
