/**
 * Finds the CUDA toolkit the CUDA natives compile with, and says what is missing before a long
 * build fails on it: nvcc, and cuBLAS's headers and library (ggml's CUDA backend multiplies large
 * matrices with it). A compiler-only install, as on machines without a GPU, may lack the driver's
 * stub `libcuda.so`; the build then leaves out CUDA's virtual memory pool (compiled.ts).
 */
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";

export interface CudaToolkit {
  root: string;
  nvcc: string;
  /** The driver's link-time stub (or the driver itself) is there. */
  driverStub: boolean;
}

/** `CUDA_PATH`, else /usr/local/cuda, else the newest /usr/local/cuda-<version>. */
export function findCudaToolkit(
  env: Record<string, string | undefined> = Bun.env,
  local = "/usr/local",
  systemLibs = "/usr/lib/x86_64-linux-gnu",
): CudaToolkit {
  const versioned = existsSync(local)
    ? readdirSync(local)
        .filter((name) => /^cuda-\d+(\.\d+)*$/.test(name))
        .sort((a, b) => b.localeCompare(a, undefined, { numeric: true }))
    : [];
  const candidates = [env.CUDA_PATH, join(local, "cuda"), ...versioned.map((name) => join(local, name))].filter(
    (dir): dir is string => dir !== undefined && dir !== "",
  );
  const root = candidates.find((dir) => existsSync(join(dir, "bin/nvcc")));
  if (root === undefined) {
    throw new Error(`the CUDA natives need CUDA's compiler: no bin/nvcc in ${candidates.join(", ")} (set CUDA_PATH to the toolkit)`);
  }
  const missing = [join(root, "include/cublas_v2.h"), join(root, "lib64/libcublas.so")].filter((file) => !existsSync(file));
  if (missing.length > 0) {
    throw new Error(
      `the CUDA natives need cuBLAS in the toolkit at ${root}: ${missing.join(" and ")} missing ` +
        "(install the toolkit's cuBLAS development files, e.g. the nvidia-cublas wheel's include/ and lib/)",
    );
  }
  const driverStub = ["lib64/stubs/libcuda.so", "lib64/libcuda.so"].some((file) => existsSync(join(root, file))) || existsSync(join(systemLibs, "libcuda.so"));
  return { root, nvcc: join(root, "bin/nvcc"), driverStub };
}
