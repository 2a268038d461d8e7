/**
 * llama-server built from the very llama.cpp tree node-llama-cpp binds, cached under `.bench/`:
 *   - for the CPU benchmarks, for this CPU (GGML_NATIVE: the best llama.cpp can do here), in
 *     `llama.cpp-build/`;
 *   - for the GPU benchmark, with its backends as plugins (GGML_BACKEND_DL, shared libraries, the
 *     natives' CPU variants), in `llama.cpp-dl-build/`: beside it the GPU machine puts the CUDA
 *     plugin of Parley's CUDA natives, so both servers run the very same CUDA kernels and only
 *     their serving differs, and no second CUDA compile is needed.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { CPU_VARIANTS, CPU_VARIANTS_HOOK } from "../../src/natives/compiled";
import { ensureLlamaSource, ROOT, run } from "../../src/natives/llama-source";

const BUILD_DIR = join(ROOT, ".bench/llama.cpp-build");
export const LLAMA_SERVER = join(BUILD_DIR, "bin/llama-server");
export const PLUGIN_BUILD_DIR = join(ROOT, ".bench/llama.cpp-dl-build");

const COMMON_OPTIONS = [
  "-DCMAKE_BUILD_TYPE=Release",
  "-DGGML_OPENMP=ON",
  "-DLLAMA_OPENSSL=OFF",
  "-DLLAMA_BUILD_TESTS=OFF",
  "-DLLAMA_BUILD_EXAMPLES=OFF",
  "-DLLAMA_BUILD_APP=OFF",
  "-DLLAMA_BUILD_SERVER=ON",
  "-DLLAMA_BUILD_TOOLS=ON",
];

/** The natives' way of loading backends: plugins found beside the binary, unversioned library names. */
const PLUGIN_OPTIONS = [
  "-DGGML_NATIVE=OFF",
  "-DGGML_BACKEND_DL=ON",
  "-DGGML_CPU_ALL_VARIANTS=ON",
  "-DBUILD_SHARED_LIBS=ON",
  "-DCMAKE_PLATFORM_NO_VERSIONED_SONAME=ON",
  "-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON",
  `-DCMAKE_PROJECT_ggml_INCLUDE=${CPU_VARIANTS_HOOK}`,
  `-DPARLEY_CPU_VARIANTS=${CPU_VARIANTS.join(",")}`,
];

export const buildLlamaServer = () => build(BUILD_DIR, ["-DGGML_NATIVE=ON"]);
/**
 * The plugin build's llama-server: its `bin/` holds the binary and the libraries it loads (the CPU
 * variants are plugins, which no target links, so they are built by name).
 */
export const buildPluginLlamaServer = () =>
  build(
    PLUGIN_BUILD_DIR,
    PLUGIN_OPTIONS,
    CPU_VARIANTS.map((variant) => `ggml-cpu-${variant}`),
  );

async function build(dir: string, options: string[], moreTargets: string[] = []): Promise<string> {
  const server = join(dir, "bin/llama-server");
  if (existsSync(server)) return server;
  const source = await ensureLlamaSource();
  console.error(`building llama-server into ${dir} (once; several minutes on 2 cores)`);
  await run(["cmake", "-S", source, "-B", dir, ...COMMON_OPTIONS, ...options]);
  await run(["cmake", "--build", dir, "--config", "Release", "--target", "llama-server", ...moreTargets, "-j", String(navigator.hardwareConcurrency)]);
  if (!existsSync(server)) throw new Error(`build finished but ${server} is missing`);
  return server;
}
