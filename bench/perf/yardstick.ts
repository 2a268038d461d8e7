/**
 * llama-server built from the very llama.cpp tree node-llama-cpp binds, for this CPU (GGML_NATIVE:
 * the yardstick is the best llama.cpp can do here), cached in `.bench/llama.cpp-build/`.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { ensureLlamaSource, ROOT, run } from "../../src/natives/llama-source";

const BUILD_DIR = join(ROOT, ".bench/llama.cpp-build");
export const LLAMA_SERVER = join(BUILD_DIR, "bin/llama-server");

export async function buildLlamaServer(): Promise<string> {
  if (existsSync(LLAMA_SERVER)) return LLAMA_SERVER;
  const source = await ensureLlamaSource();
  console.error(`building llama-server into ${BUILD_DIR} (once; several minutes on 2 cores)`);
  await run([
    "cmake",
    "-S",
    source,
    "-B",
    BUILD_DIR,
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DGGML_OPENMP=ON",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
  ]);
  await run(["cmake", "--build", BUILD_DIR, "--config", "Release", "--target", "llama-server", "-j", String(navigator.hardwareConcurrency)]);
  if (!existsSync(LLAMA_SERVER)) throw new Error(`build finished but ${LLAMA_SERVER} is missing`);
  return LLAMA_SERVER;
}
