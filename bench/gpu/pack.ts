/**
 * `bun bench/gpu/pack.ts [--cuda-arch 90]`: everything the GPU machine needs, packed into
 * `.gpu/payload.tar.xz` and `.gpu/libggml-cuda.so.xz` (ignored by git), since that machine has
 * no network, no Bun and no node_modules, and a call sends at most 64 MiB. The CUDA plugin
 * (`libggml-cuda.so`, 37 MiB under xz for Hopper alone) and the executable (Bun itself is 38 MiB)
 * do not fit in one call, so each goes in its own (a first call carries the plugin, a second the
 * payload, while the machine is warm); where the plugin did not come, run.sh compiles it there
 * from the same source and options. The payload holds:
 *   - `parley`: the executable with the CPU natives, which also runs the benchmark's scripts as Bun
 *     would (`BUN_BE_BUN=1`);
 *   - `natives-cuda/`: the CUDA natives compiled here (`bun run natives --gpu cuda`) but their
 *     plugin: the addon and libraries the executable finds beside its unpacked natives;
 *   - `ggml/` and `ggml-cuda.options`: ggml's source (its CUDA backend and what it builds on) and
 *     the CMake options of those natives, to compile the plugin there (bench/gpu/run.sh);
 *   - `llama/`: llama-server built with its backends as plugins (bench/perf/yardstick.ts), beside
 *     which run.sh puts that same plugin, so both servers run the same kernels;
 *   - `bench/perf.js`, `bench/check.js`: the benchmark and the correctness check, bundled;
 *   - `provenance.env`: this checkout's commit and llama.cpp's, which the result files record
 *     (bench/perf/provenance.ts) and that machine, without git or node_modules, cannot tell.
 * `bash bench/gpu/run.sh --cpu` rehearses it here.
 */
import { copyFileSync, cpSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { ensureCompiledNatives } from "../../src/natives/compile";
import { CMAKE_OPTIONS, CUDA_FOLDER, CUDA_RECIPE_FILE, type CudaRecipe, cudaCmakeOptions } from "../../src/natives/compiled";
import { LLAMA_CPP_DIR } from "../../src/natives/llama-source";
import { provenance } from "../perf/provenance";
import { buildPluginLlamaServer } from "../perf/yardstick";

const ROOT = join(import.meta.dir, "../..");
/** What one device call may send, the working tree included. */
const SEND_LIMIT = 64 * 2 ** 20;
/** ggml's backends' folders other than the CPU's and CUDA's: not needed to build the CUDA plugin. */
const OTHER_BACKENDS = /^ggml-(?!cpu$|cuda$)/;

const { values } = parseArgs({ args: Bun.argv.slice(2), options: { "cuda-arch": { type: "string", default: "90" } } });
const stage = join(ROOT, ".bench/gpu-stage");
const packed = join(ROOT, ".gpu/payload.tar.xz");
const plugin = join(ROOT, ".gpu/libggml-cuda.so.xz");
rmSync(stage, { recursive: true, force: true });
mkdirSync(join(stage, "llama"), { recursive: true });
mkdirSync(join(ROOT, ".gpu"), { recursive: true });

const step = async (what: string, cmd: string[]) => {
  console.error(`pack: ${what}`);
  const code = await Bun.spawn(cmd, { cwd: ROOT, stdio: ["ignore", "inherit", "inherit"] }).exited;
  if (code !== 0) throw new Error(`pack: ${cmd.join(" ")} exited with ${code}`);
};

await step("the executable", ["bun", "run", "build", "--outfile", join(stage, "parley")]);

const { binsDir } = await ensureCompiledNatives({ cudaArchitectures: values["cuda-arch"]! });
const cudaBuild = join(binsDir, CUDA_FOLDER);
cpSync(cudaBuild, join(stage, "natives-cuda"), { recursive: true, filter: (path) => !path.endsWith("/libggml-cuda.so") });
const recipe = (await Bun.file(join(cudaBuild, CUDA_RECIPE_FILE)).json()) as CudaRecipe;
// The natives' own options, less the hooks (they act on the addon and the CPU variants, neither built there).
const hooks = new Set([...Object.keys(CMAKE_OPTIONS).filter((key) => key.startsWith("PARLEY_") || key.startsWith("CMAKE_PROJECT_")), "GGML_CPU_ALL_VARIANTS"]);
const options = Object.entries(cudaCmakeOptions(recipe)).filter(([key]) => !hooks.has(key));
writeFileSync(
  join(stage, "ggml-cuda.options"),
  [
    ...options,
    ["GGML_CPU", "OFF"],
    ["GGML_BUILD_TESTS", "OFF"],
    ["GGML_BUILD_EXAMPLES", "OFF"],
    ["BUILD_SHARED_LIBS", "ON"],
    ["CMAKE_PLATFORM_NO_VERSIONED_SONAME", "ON"],
    ["CMAKE_BUILD_TYPE", "Release"],
  ]
    .map(([key, value]) => `-D${key}=${value}`)
    .join("\n"),
);
const ggmlSource = join(LLAMA_CPP_DIR, "ggml");
cpSync(ggmlSource, join(stage, "ggml"), {
  recursive: true,
  filter: (path) => !(dirname(path) === join(ggmlSource, "src") && OTHER_BACKENDS.test(basename(path)) && statSync(path).isDirectory()),
});
// Configured on its own, ggml writes a pkg-config file from this template, which node-llama-cpp's
// copy of the source leaves out; nothing reads what it writes.
writeFileSync(join(stage, "ggml/ggml.pc.in"), "");

const server = await buildPluginLlamaServer();
const bin = join(server, "..");
copyFileSync(server, join(stage, "llama/llama-server"));
for (const name of readdirSync(bin).filter((file) => /^lib.*\.so$/.test(file))) copyFileSync(join(bin, name), join(stage, "llama", name));
// Its CPU backends use OpenMP, whose runtime a bare machine may lack (the natives carry theirs).
cpSync((await Bun.$`gcc -print-file-name=libgomp.so.1`.text()).trim(), join(stage, "llama/libgomp.so.1"), { dereference: true });
for (const script of ["perf.ts", "gpu/check.ts"]) {
  const entry = join(ROOT, "bench", script);
  const result = await Bun.build({ entrypoints: [entry], target: "bun", outdir: join(stage, "bench") });
  if (!result.success) throw new Error(`pack: bundling ${entry} failed: ${result.logs.join("\n")}`);
}
// Only its commits are wanted: no model, server or natives to describe here.
const recorded = await provenance({ model: "", llamaServer: undefined, binary: undefined, nativesDir: undefined, localCompiled: undefined });
writeFileSync(
  join(stage, "provenance.env"),
  `PARLEY_BENCH_COMMIT=${recorded.parley.commit ?? ""}\nPARLEY_BENCH_LLAMA_CPP_COMMIT=${recorded.llamaCpp.commit ?? ""}\n`,
);
if (recorded.parley.dirty) console.error("pack: the checkout has uncommitted changes, which the commit recorded there does not show");
await step("compressing", ["tar", "-cf", packed, "-I", "xz -9 -T0", "-C", stage, "."]);
await step("compressing the plugin", ["sh", "-c", `xz -9 -T0 -c "${join(cudaBuild, "libggml-cuda.so")}" >"${plugin}"`]);

const tracked = (await Bun.$`git ls-files -z`.cwd(ROOT).text()).split("\0").filter(Boolean);
const treeBytes = tracked.reduce((sum, file) => sum + (statSync(join(ROOT, file), { throwIfNoEntry: false })?.size ?? 0), 0);
const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
for (const file of [packed, plugin]) {
  const total = treeBytes + statSync(file).size;
  console.log(`pack: ${file} ${mib(statSync(file).size)}, with the working tree ${mib(total)} of ${mib(SEND_LIMIT)}`);
  if (total > SEND_LIMIT) throw new Error("pack: over what a device call may send");
}
