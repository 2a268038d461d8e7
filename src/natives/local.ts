/**
 * From a checkout, locally compiled natives (`bun run natives`, cached outside the repo: see
 * src/natives/compiled.ts) replace the npm prebuilt when present.
 *
 * node-llama-cpp has no option for a binaries directory: it imports `@node-llama-cpp/linux-x64`
 * and asks its `getBinsDir()`. A Bun runtime plugin answers that import with a module pointing
 * at the compiled build instead, so node-llama-cpp loads, tests and initialises it exactly as it
 * does the prebuilt. Without the build nothing changes: the prebuilt stays the fallback and a
 * fresh checkout needs no compiler. The single executable carries its own natives (chosen when it
 * was built) and never looks here.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { getModuleVersion } from "node-llama-cpp";
import { CUDA_FOLDER, compiledNativesDir, PLATFORM_FOLDER } from "./compiled";

const PREBUILT_PACKAGE = "@node-llama-cpp/linux-x64";
/** node-llama-cpp's packages for `gpu: "cuda"`: the plugin, and its extra backends (none of Parley's). */
const CUDA_PACKAGE = "@node-llama-cpp/linux-x64-cuda";
const CUDA_EXT_PACKAGE = "@node-llama-cpp/linux-x64-cuda-ext";

let redirected: string | undefined;

/** Running as the single executable, which carries the natives chosen when it was built. */
export const IN_EXECUTABLE = import.meta.dir.startsWith("/$bunfs/");

/**
 * Why Parley's CUDA natives cannot be used here, or undefined when they are at hand: in the
 * executable, whether it was built with them or finds them beside its unpacked natives; in a checkout, whether `bun run natives --gpu cuda`
 * built them (call after `useLocalNatives`).
 */
export async function cudaNativesMissing(): Promise<string | undefined> {
  if (IN_EXECUTABLE) {
    // A literal specifier: the executable's bundler replaces only the packages it can see.
    const { getBinsDir } = await import("@node-llama-cpp/linux-x64-cuda");
    return getBinsDir().binsDir === undefined
      ? "this executable has no CUDA natives (none built in with `bun run build --gpu cuda`, none beside its unpacked natives)"
      : undefined;
  }
  if (redirected === undefined) return "the local natives are not in use";
  return holds(redirected, CUDA_FOLDER) ? undefined : "the CUDA natives are not built (`bun run natives --gpu cuda`)";
}

/** The compiled natives' `binsDir` for the installed node-llama-cpp, whether built or not. */
export async function localNativesDir(): Promise<string> {
  return compiledNativesDir(await getModuleVersion());
}

/** Whether the compiled natives for this recipe are built (`bun run natives`). */
export async function compiledNativesBuilt(): Promise<boolean> {
  return holds(await localNativesDir(), PLATFORM_FOLDER);
}

/**
 * Points node-llama-cpp at `binsDir` (default: the compiled build) when it holds a build for this
 * platform; returns the directory used, or undefined for the prebuilt. Call before `getLlama`.
 */
export async function useLocalNatives(binsDir?: string): Promise<string | undefined> {
  if (IN_EXECUTABLE) return undefined;
  if (process.platform !== "linux" || process.arch !== "x64") return undefined;
  const dir = binsDir ?? (await localNativesDir());
  if (redirected !== undefined) return redirected === dir && holds(dir, PLATFORM_FOLDER) ? dir : undefined;
  // node-llama-cpp ignores a bins package whose version differs from its own.
  const packageVersion = await getModuleVersion();
  const answer = (answered: string | undefined) => () => ({
    loader: "object" as const,
    exports: { getBinsDir: () => (answered ? { binsDir: answered, packageVersion } : {}) },
  });
  Bun.plugin({
    name: "parley-local-natives",
    setup(build) {
      // Without the CPU build, npm's prebuilt stays the CPU natives.
      if (holds(dir, PLATFORM_FOLDER)) build.module(PREBUILT_PACKAGE, answer(dir));
      // Without Parley's CUDA build, `gpu: "cuda"` finds no binaries rather than npm's CUDA
      // prebuilt, which lacks Parley's own native methods.
      build.module(CUDA_PACKAGE, answer(holds(dir, CUDA_FOLDER) ? dir : undefined));
      build.module(CUDA_EXT_PACKAGE, answer(undefined));
    },
  });
  redirected = dir;
  return holds(dir, PLATFORM_FOLDER) ? dir : undefined;
}

/** Whether `binsDir` holds a build in `folder`. */
const holds = (binsDir: string, folder: string) => existsSync(join(binsDir, folder, "llama-addon.node"));
