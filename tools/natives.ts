/**
 * `bun run natives [--force] [--gpu cuda [--cuda-arch <list>]]`: compiles the fast CPU natives into
 * the cache (src/natives/compile.ts) unless this recipe's build is already there; `--force` compiles
 * again (another compiler, say). `--gpu cuda` compiles the CUDA build beside it (CUDA's toolkit
 * needed, no GPU), for the architectures given (CMAKE_CUDA_ARCHITECTURES; default: a list from
 * Ampere to Blackwell). `--target linux-arm64` cross-compiles the ARM64 build beside it (Debian's
 * g++-aarch64-linux-gnu). `bun run start` and `bun run build` then use them.
 */
import { parseArgs } from "node:util";
import { ensureCompiledNatives } from "../src/natives/compile";
import { cudaArchitecturesOf, targetOf } from "../src/natives/compiled";

const { values: flags } = parseArgs({
  args: Bun.argv.slice(2),
  options: { force: { type: "boolean", default: false }, gpu: { type: "string" }, "cuda-arch": { type: "string" }, target: { type: "string" } },
});
const cudaArchitectures = cudaArchitecturesOf(flags);
const arm64 = targetOf(flags) === "linux-arm64";
const what = arm64 ? "ARM64 natives" : cudaArchitectures === undefined ? "natives" : `CUDA natives (${cudaArchitectures})`;
const { binsDir, compiledSeconds } = await ensureCompiledNatives({
  force: flags.force,
  arm64,
  ...(cudaArchitectures === undefined ? {} : { cudaArchitectures }),
});
console.log(compiledSeconds === undefined ? `${what}: already built in ${binsDir}` : `${what}: built into ${binsDir} in ${compiledSeconds} s`);
