/**
 * `bun run natives [--force] [--gpu cuda [--cuda-arch <list>]]`: compiles the fast CPU natives into
 * the cache (src/natives/compile.ts) unless this recipe's build is already there; `--force` compiles
 * again (another compiler, say). `--gpu cuda` compiles the CUDA build beside it (CUDA's toolkit
 * needed, no GPU), for the architectures given (CMAKE_CUDA_ARCHITECTURES; default: a list from
 * Ampere to Blackwell). `bun run start` and `bun run build` then use them.
 */
import { parseArgs } from "node:util";
import { ensureCompiledNatives } from "../src/natives/compile";
import { cudaArchitecturesOf } from "../src/natives/compiled";

const { values: flags } = parseArgs({
  args: Bun.argv.slice(2),
  options: { force: { type: "boolean", default: false }, gpu: { type: "string" }, "cuda-arch": { type: "string" } },
});
const cudaArchitectures = cudaArchitecturesOf(flags);
const what = cudaArchitectures === undefined ? "natives" : `CUDA natives (${cudaArchitectures})`;
const { binsDir, compiledSeconds } = await ensureCompiledNatives({ force: flags.force, ...(cudaArchitectures === undefined ? {} : { cudaArchitectures }) });
console.log(compiledSeconds === undefined ? `${what}: already built in ${binsDir}` : `${what}: built into ${binsDir} in ${compiledSeconds} s`);
