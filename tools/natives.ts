/**
 * `bun run natives`: compiles node-llama-cpp's bundled llama.cpp for the CPU with this machine's
 * compiler and OpenMP, into `dist/natives/bins/linux-x64/` laid out like the prebuilt package.
 *
 * Why: the npm prebuilt's CPU kernels (older GCC, no OpenMP) ran the F16 matmul ~2x slower here
 * and spawn fresh threads every decode step. The build stays portable like the prebuilt: every
 * x86-64 CPU variant is compiled and ggml picks one at run time (GGML_CPU_ALL_VARIANTS +
 * GGML_BACKEND_DL), never -march=native. libgomp is copied next to the libraries (they load each
 * other via $ORIGIN) so the directory runs on machines without GCC's runtime installed.
 */
import { existsSync, readFileSync } from "node:fs";
import { cp, mkdir, readdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { ensureLlamaSource, NLC_CLI, NLC_LLAMA_DIR, ROOT, run } from "./llama-source";
import { NATIVES_BINS_DIR } from "../src/llm/natives";

const CMAKE_OPTIONS = {
  GGML_NATIVE: "OFF",
  GGML_CPU_ALL_VARIANTS: "ON",
  GGML_BACKEND_DL: "ON",
  GGML_OPENMP: "ON",
};

if (process.platform !== "linux" || process.arch !== "x64") {
  console.error(`bun run natives builds linux-x64 natives; this is ${process.platform}-${process.arch}`);
  process.exit(2);
}

const started = performance.now();
await ensureLlamaSource();
await run([NLC_CLI, "source", "build", "--gpu", "false", "--noUsageExample"], {
  env: Object.fromEntries(Object.entries(CMAKE_OPTIONS).map(([k, v]) => [`NODE_LLAMA_CPP_CMAKE_OPTION_${k}`, v])),
});

// node-llama-cpp records the folder it just built into; the options are hashed into its name.
const { folderName } = JSON.parse(readFileSync(join(NLC_LLAMA_DIR, "lastBuild.json"), "utf8")) as { folderName: string };
const built = join(NLC_LLAMA_DIR, "localBuilds", folderName, "Release");
if (!existsSync(join(built, "llama-addon.node"))) throw new Error(`no llama-addon.node in ${built}`);

// Assembled beside the target and renamed into place, so a running server never sees half a directory.
const staging = `${NATIVES_BINS_DIR}.tmp-${process.pid}`;
await rm(staging, { recursive: true, force: true });
await mkdir(staging, { recursive: true });
for (const name of await readdir(built)) {
  if (name.endsWith(".node") || name.endsWith(".so") || name.endsWith(".json")) await cp(join(built, name), join(staging, name));
}
const libgomp = (await Bun.$`gcc -print-file-name=libgomp.so.1`.text()).trim();
if (!existsSync(libgomp)) throw new Error(`libgomp.so.1 not found (gcc says "${libgomp}")`);
await cp(libgomp, join(staging, "libgomp.so.1"), { dereference: true });

await rm(NATIVES_BINS_DIR, { recursive: true, force: true });
await rename(staging, NATIVES_BINS_DIR);
console.log(
  `natives: ${NATIVES_BINS_DIR.slice(ROOT.length + 1)} (${(await readdir(NATIVES_BINS_DIR)).length} files) ` +
    `in ${Math.round((performance.now() - started) / 1000)} s`,
);
