/**
 * Locally compiled natives (`bun run natives`) replace the npm prebuilt when present.
 *
 * node-llama-cpp has no option for a binaries directory: it imports `@node-llama-cpp/linux-x64`
 * and asks its `getBinsDir()`. A Bun runtime plugin answers that import with a module pointing
 * at `dist/natives/bins` instead, so node-llama-cpp loads, tests and initialises the local build
 * exactly as it does the prebuilt. Without the directory nothing changes: the prebuilt stays the
 * fallback and a fresh checkout needs no compiler.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { getModuleVersion } from "node-llama-cpp";

const PREBUILT_PACKAGE = "@node-llama-cpp/linux-x64";

/** `dist/natives/bins`, laid out like the prebuilt package's `bins/`. */
export const NATIVES_DIR = join(import.meta.dir, "../../dist/natives/bins");
export const NATIVES_BINS_DIR = join(NATIVES_DIR, "linux-x64");

let redirected: string | undefined;

/**
 * Points node-llama-cpp at `binsDir` (default: the local build) when it holds a build for this
 * platform; returns the directory used, or undefined for the prebuilt. Call before `getLlama`.
 */
export async function useLocalNatives(binsDir: string = NATIVES_DIR): Promise<string | undefined> {
  if (redirected !== undefined) return redirected === binsDir ? binsDir : undefined;
  if (process.platform !== "linux" || process.arch !== "x64") return undefined;
  if (!existsSync(join(binsDir, "linux-x64", "llama-addon.node"))) return undefined;
  // node-llama-cpp ignores a bins package whose version differs from its own.
  const packageVersion = await getModuleVersion();
  Bun.plugin({
    name: "parley-local-natives",
    setup(build) {
      build.module(PREBUILT_PACKAGE, () => ({
        loader: "object",
        exports: { getBinsDir: () => ({ binsDir, packageVersion }) },
      }));
    },
  });
  redirected = binsDir;
  return binsDir;
}
