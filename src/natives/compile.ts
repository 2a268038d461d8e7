/**
 * Compiles node-llama-cpp's bundled llama.cpp for the CPU with this machine's compiler and OpenMP,
 * into the cache directory of src/natives/compiled.ts, laid out like the prebuilt package's
 * `bins/linux-x64/`. Used by `bun run natives` and by `bun run build` when the build is missing.
 * With a CUDA recipe it compiles the same plus ggml's CUDA plugin into `bins/linux-x64-cuda/`; for
 * the ARM64 target it cross-compiles ggml's ARM variants into `bins/linux-arm64/`.
 *
 * Why: the npm prebuilt's CPU kernels (older GCC, no OpenMP) ran the F16 matmul far slower here
 * and spawn fresh threads every decode step; and all decodes run on one thread (decode-thread.cpp).
 * libgomp is copied next to the libraries (they load each other via $ORIGIN) so the directory runs
 * on machines without GCC's runtime installed.
 */
import { createWriteStream, existsSync, readFileSync } from "node:fs";
import { cp, mkdir, readdir, rename, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { removeOtherRecipes, withBuildLock } from "./build-lock";
import { parseStep, progressLine } from "./build-progress";
import {
  ARM64_CMAKE_OPTIONS,
  ARM64_CPU_VARIANTS,
  ARM64_FOLDER,
  ARM64_RECIPE_FILE,
  ARM64_TOOL_PREFIX,
  CMAKE_OPTIONS,
  CPU_VARIANTS,
  CUDA_FOLDER,
  CUDA_RECIPE_FILE,
  type CudaRecipe,
  compiledNativesDir,
  cudaCmakeOptions,
  HOOK_SYMBOLS,
  PLATFORM_FOLDER,
} from "./compiled";
import { type CudaToolkit, findCudaToolkit } from "./cuda-toolkit";
import { ensureLlamaSource, NLC_CLI, NLC_LLAMA_DIR, ROOT } from "./llama-source";
import { checkNodeLlamaCppVersion } from "./version";

export interface CompiledNatives {
  /** node-llama-cpp's `binsDir`: the build is in its `linux-x64/`. */
  binsDir: string;
  /** Seconds the compile took; undefined when the cached build was used. */
  compiledSeconds?: number;
}

export function nodeLlamaCppVersion(): string {
  return (JSON.parse(readFileSync(join(NLC_LLAMA_DIR, "../package.json"), "utf8")) as { version: string }).version;
}

export interface CompileOptions {
  /** Compile again even when this recipe's build is cached. */
  force?: boolean;
  /** The CUDA build with these architectures (the CPU build when absent). */
  cudaArchitectures?: string;
  /** Cross-compile for ARM64 Linux (the CPU build only). */
  arm64?: boolean;
}

/** The tools compiling the natives runs: node-llama-cpp's build runs cmake-js through npm, and its CMakeLists runs node. */
const BUILD_TOOLS = ["cmake", "c++", "gcc", "nm", "node", "npm"];

/** What this machine lacks to compile the natives (for ARM64 when `arm64`), in one line naming what to install; undefined when it can. */
export function missingBuildTools(arm64 = false): string | undefined {
  if (process.platform !== "linux" || process.arch !== "x64")
    return `the natives compile runs on linux-x64 (and cross-compiles for linux-arm64); this is ${process.platform}-${process.arch}`;
  const cross = arm64 ? [`${ARM64_TOOL_PREFIX}g++`, `${ARM64_TOOL_PREFIX}gcc`, `${ARM64_TOOL_PREFIX}nm`] : [];
  const missing = [...BUILD_TOOLS, ...cross].filter((tool) => Bun.which(tool) === null);
  if (missing.length === 0) return undefined;
  const packages = ["cmake build-essential nodejs npm", ...(arm64 ? ["g++-aarch64-linux-gnu"] : [])].join(" ");
  return `compiling the natives needs ${missing.join(", ")} on the PATH (Debian: apt-get install ${packages})`;
}

/**
 * The cached build for the current recipe, compiled first if missing (or if `force`), holding the
 * cache's build lock: a second build waits for the first and then uses what it built. Every call
 * removes the other recipes' builds of this node-llama-cpp version.
 */
export async function ensureCompiledNatives(options: CompileOptions = {}): Promise<CompiledNatives> {
  checkNodeLlamaCppVersion(nodeLlamaCppVersion(), "compiling the natives");
  const binsDir = compiledNativesDir(nodeLlamaCppVersion());
  return await withBuildLock(
    dirname(binsDir),
    async () => {
      const built = await compileUnlessCached(binsDir, options);
      for (const name of removeOtherRecipes(binsDir, nodeLlamaCppVersion())) console.log(`natives: removed another recipe's build, ${name}`);
      return built;
    },
    (holder) => console.log(`natives: another build (pid ${holder}) holds ${join(dirname(binsDir), "build.lock")}: waiting for it`),
  );
}

/** One build of the natives: its folder in `binsDir`, its options, and what it records of a recipe the folder's name does not hash. */
interface Build {
  folder: string;
  options: Readonly<Record<string, string>>;
  variants: readonly string[];
  /** node-llama-cpp's `--gpu` and, when cross-compiling, `--arch`. */
  args: string[];
  /** The compiler tools' prefix (`aarch64-linux-gnu-` when cross-compiling). */
  tools: string;
  recorded?: { file: string; recipe: unknown };
  cuda?: CudaBuild;
}

function buildOf({ cudaArchitectures, arm64 = false }: CompileOptions): Build {
  if (arm64) {
    if (cudaArchitectures !== undefined) throw new Error("the ARM64 natives are the CPU build only: leave out --gpu cuda");
    return {
      folder: ARM64_FOLDER,
      options: ARM64_CMAKE_OPTIONS,
      variants: ARM64_CPU_VARIANTS,
      args: ["--gpu", "false", "--arch", "arm64"],
      tools: ARM64_TOOL_PREFIX,
      recorded: { file: ARM64_RECIPE_FILE, recipe: { variants: ARM64_CPU_VARIANTS } },
    };
  }
  if (cudaArchitectures === undefined) return { folder: PLATFORM_FOLDER, options: CMAKE_OPTIONS, variants: CPU_VARIANTS, args: ["--gpu", "false"], tools: "" };
  const cuda = cudaBuild(cudaArchitectures);
  return {
    folder: CUDA_FOLDER,
    options: cudaCmakeOptions(cuda.recipe),
    variants: CPU_VARIANTS,
    args: ["--gpu", "cuda"],
    tools: "",
    recorded: { file: CUDA_RECIPE_FILE, recipe: cuda.recipe },
    cuda,
  };
}

async function compileUnlessCached(binsDir: string, options: CompileOptions): Promise<CompiledNatives> {
  const build = buildOf(options);
  const { cuda } = build;
  const target = join(binsDir, build.folder);
  if (!options.force && existsSync(join(target, "llama-addon.node")) && sameRecipe(target, build.recorded)) return { binsDir };
  const lacking = missingBuildTools(options.arm64);
  if (lacking !== undefined) throw new Error(`${lacking}; \`bun run build --prebuilt-natives\` embeds the slower npm prebuilt instead`);

  const started = performance.now();
  await ensureLlamaSource();
  await mkdir(binsDir, { recursive: true });
  const log = join(binsDir, build.folder === PLATFORM_FOLDER ? "build.log" : `build-${build.folder}.log`);
  // A cross build must not stay node-llama-cpp's last build: a checkout's engine would look at it first.
  const lastBuild = join(NLC_LLAMA_DIR, "lastBuild.json");
  const before = existsSync(lastBuild) ? readFileSync(lastBuild) : undefined;
  await compile(log, build);

  // node-llama-cpp records the folder it just built into; the options are hashed into its name.
  const { folderName } = JSON.parse(readFileSync(lastBuild, "utf8")) as { folderName: string };
  if (options.arm64) {
    if (before === undefined) await rm(lastBuild, { force: true });
    else await Bun.write(lastBuild, before);
  }
  const built = join(NLC_LLAMA_DIR, "localBuilds", folderName, "Release");
  const names = await readdir(built);
  const expected = ["llama-addon.node", ...build.variants.map((variant) => `libggml-cpu-${variant}.so`), ...(cuda ? ["libggml-cuda.so"] : [])];
  const missing = expected.filter((name) => !names.includes(name));
  if (missing.length > 0) throw new Error(`${built} lacks ${missing.join(", ")} (build log: ${log})`);
  const addon = readFileSync(join(built, "llama-addon.node"));
  const unhooked = HOOK_SYMBOLS.filter((symbol) => !addon.includes(symbol));
  if (unhooked.length > 0) {
    throw new Error(`${built}/llama-addon.node was linked without src/natives/decode-thread.cmake's sources (no ${unhooked.join(", ")}; build log: ${log})`);
  }
  // A `__real_` symbol the link left unresolved means a wrap did not happen: the addon would load
  // and fail at its first call.
  const unresolved = (await Bun.$`${build.tools}nm -D --undefined-only ${join(built, "llama-addon.node")}`.text())
    .split("\n")
    .filter((line) => line.includes("__real_"));
  if (unresolved.length > 0)
    throw new Error(
      `${built}/llama-addon.node leaves ${unresolved.map((line) => line.trim()).join(", ")} unresolved: the link did not wrap them (build log: ${log})`,
    );

  // Assembled beside the target and renamed into place, so a running server never sees half a directory.
  const staging = `${target}.tmp-${process.pid}`;
  await rm(staging, { recursive: true, force: true });
  await mkdir(staging);
  for (const name of names) {
    if (name.endsWith(".node") || name.endsWith(".so") || name.endsWith(".json")) await cp(join(built, name), join(staging, name));
  }
  const libgomp = (await Bun.$`${build.tools}gcc -print-file-name=libgomp.so.1`.text()).trim();
  if (!existsSync(libgomp)) throw new Error(`libgomp.so.1 not found (${build.tools}gcc says "${libgomp}")`);
  await cp(libgomp, join(staging, "libgomp.so.1"), { dereference: true });
  if (build.recorded) await Bun.write(join(staging, build.recorded.file), `${JSON.stringify(build.recorded.recipe)}\n`);
  await rm(target, { recursive: true, force: true });
  await rename(staging, target);
  return { binsDir, compiledSeconds: Math.round((performance.now() - started) / 1000) };
}

interface CudaBuild {
  recipe: CudaRecipe;
  toolkit: CudaToolkit;
}

/** The CUDA build for `architectures` with this machine's toolkit (its VMM pool only where the driver's stub is there to link). */
function cudaBuild(architectures: string): CudaBuild {
  const toolkit = findCudaToolkit();
  if (!toolkit.driverStub) {
    console.warn(`natives: ${toolkit.root} has no driver stub (lib64/stubs/libcuda.so): the CUDA build leaves out CUDA's virtual memory pool`);
  }
  return { recipe: { architectures, vmm: toolkit.driverStub }, toolkit };
}

/** Whether the build in `target` was made for the recipe it records (the x86-64 CPU build's is its directory's name). */
function sameRecipe(target: string, recorded: Build["recorded"]): boolean {
  if (recorded === undefined) return true;
  const file = join(target, recorded.file);
  return existsSync(file) && readFileSync(file, "utf8").trim() === JSON.stringify(recorded.recipe);
}

/** Runs node-llama-cpp's source build, its output into `log` and its steps onto one progress line. */
async function compile(log: string, { options, args, cuda }: Build): Promise<void> {
  const proc = Bun.spawn([NLC_CLI, "source", "build", ...args, "--noUsageExample"], {
    cwd: ROOT,
    env: {
      ...process.env,
      ...Object.fromEntries(Object.entries(options).map(([k, v]) => [`NODE_LLAMA_CPP_CMAKE_OPTION_${k}`, v])),
      ...(cuda ? { CUDACXX: cuda.toolkit.nvcc, CUDA_PATH: cuda.toolkit.root, CUDAToolkit_ROOT: cuda.toolkit.root } : {}),
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const file = createWriteStream(log);
  const tail: string[] = [];
  const progress = progressLine("natives: compiling");
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    let pending = "";
    for await (const bytes of stream) {
      file.write(bytes);
      const chunk = decoder.decode(bytes, { stream: true });
      const lines = (pending + chunk).split(/\r?\n/);
      pending = lines.pop()!;
      for (const line of lines) {
        const step = parseStep(line);
        if (step) progress.step(step);
        tail.push(line);
        if (tail.length > 40) tail.shift();
      }
    }
  };
  const [code] = await Promise.all([proc.exited, pump(proc.stdout), pump(proc.stderr)]);
  progress.end();
  await new Promise((resolve) => file.end(resolve));
  if (code !== 0) throw new Error(`the natives compile failed (exit ${code}); the end of its output:\n${tail.join("\n")}\nwhole log: ${log}`);
}
