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
import { compiledNativesDir, PLATFORM_FOLDER } from "./compiled";

const PREBUILT_PACKAGE = "@node-llama-cpp/linux-x64";

let redirected: string | undefined;

/** Running as the single executable, which carries the natives chosen when it was built. */
export const IN_EXECUTABLE = import.meta.dir.startsWith("/$bunfs/");

/** The compiled natives' `binsDir` for the installed node-llama-cpp, whether built or not. */
export async function localNativesDir(): Promise<string> {
  return compiledNativesDir(await getModuleVersion());
}

/**
 * Points node-llama-cpp at `binsDir` (default: the compiled build) when it holds a build for this
 * platform; returns the directory used, or undefined for the prebuilt. Call before `getLlama`.
 */
export async function useLocalNatives(binsDir?: string): Promise<string | undefined> {
  if (IN_EXECUTABLE) return undefined;
  if (process.platform !== "linux" || process.arch !== "x64") return undefined;
  const dir = binsDir ?? (await localNativesDir());
  if (redirected !== undefined) return redirected === dir ? dir : undefined;
  if (!existsSync(join(dir, PLATFORM_FOLDER, "llama-addon.node"))) return undefined;
  // node-llama-cpp ignores a bins package whose version differs from its own.
  const packageVersion = await getModuleVersion();
  Bun.plugin({
    name: "parley-local-natives",
    setup(build) {
      build.module(PREBUILT_PACKAGE, () => ({
        loader: "object",
        exports: { getBinsDir: () => ({ binsDir: dir, packageVersion }) },
      }));
    },
  });
  redirected = dir;
  return dir;
}
