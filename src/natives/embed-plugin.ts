/**
 * The Bun.build plugin that lets node-llama-cpp run inside the single executable. In a compiled
 * binary `import.meta.url` is `/$bunfs/root/...`, so every file node-llama-cpp locates next to its
 * own code is missing, and its optional per-platform packages do not resolve. The plugin:
 *  1. replaces `@node-llama-cpp/linux-x64` (and `@node-llama-cpp/linux-x64-cuda` when the CUDA
 *     natives are embedded) with a module that unpacks the embedded natives on first use
 *     (src/natives/cache.ts) and returns that directory from `getBinsDir()`; without embedded CUDA
 *     natives, the CUDA package returns it only where a CUDA build was placed in it;
 *  2. replaces every other `@node-llama-cpp/*` package with one whose `getBinsDir()` returns `{}`,
 *     which node-llama-cpp reads as "not installed";
 *  3. patches three files of node-llama-cpp (below), each patch failing the build if its text is
 *     not found exactly once, or if its file was never bundled.
 * The patches are written against one version of node-llama-cpp; any other fails the build.
 */

import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { BunPlugin } from "bun";
import { ARM64_FOLDER, CUDA_FOLDER, PLATFORM_FOLDER } from "./compiled";
import type { PackedNatives } from "./embed-pack";
import { checkNodeLlamaCppVersion, NODE_LLAMA_CPP_VERSION } from "./version";

export interface NativesPluginOptions {
  natives: PackedNatives;
  /** The installed node-llama-cpp package's directory. */
  packageDir: string;
  /** Absolute path of src/natives/cache.ts. */
  cacheModule: string;
}

interface Patch {
  file: RegExp;
  find: string;
  replace: string;
  why: string;
}

const NAMESPACE = "parley-natives";
/** node-llama-cpp's package for each folder the executable may embed. */
const PACKAGE_OF_FOLDER: Readonly<Record<string, string>> = {
  [PLATFORM_FOLDER]: "@node-llama-cpp/linux-x64",
  [ARM64_FOLDER]: "@node-llama-cpp/linux-arm64",
  [CUDA_FOLDER]: "@node-llama-cpp/linux-x64-cuda",
};

/** Throws unless the installed node-llama-cpp is the version the patches were written for. */
export function assertPinnedVersion(packageDir: string): void {
  const { version } = JSON.parse(readFileSync(join(packageDir, "package.json"), "utf8")) as { version: string };
  checkNodeLlamaCppVersion(version, "natives plugin");
}

export function nativesPlugin({ natives, packageDir, cacheModule }: NativesPluginOptions): BunPlugin {
  assertPinnedVersion(packageDir);
  const patches: Patch[] = [
    {
      why: "reads llama/binariesGithubRelease.json (not in the executable) at import time",
      file: /\/node-llama-cpp\/dist\/bindings\/utils\/binariesGithubRelease\.js$/,
      find: "await fs.readJson(binariesGithubReleasePath)",
      replace: readFileSync(join(packageDir, "llama/binariesGithubRelease.json"), "utf8").trim(),
    },
    {
      why: "reads its own package.json (not in the executable) for the version the natives must match",
      file: /\/node-llama-cpp\/dist\/utils\/getModuleVersion\.js$/,
      find: `await fs.readJson(path.join(__dirname, "..", "..", "package.json"))`,
      replace: JSON.stringify({ version: NODE_LLAMA_CPP_VERSION }),
    },
    {
      // It would fork its own .js file to try the addon first; in one bundled file it cannot, and
      // only prints a warning that the test was skipped. Load errors still surface when the addon loads.
      why: "test-loads the addon in a child process started from its own file",
      file: /\/node-llama-cpp\/dist\/bindings\/utils\/testBindingBinary\.js$/,
      find: "export async function testBindingBinary(bindingBinaryPath, extBackendsPath, gpu, testTimeout = 1000 * 60 * 5, pipeOutputOnNode = false) {",
      replace: "export async function testBindingBinary() { return true;",
    },
  ];
  const applied = new Set<Patch>();

  // A module that unpacks the embedded natives and answers with their directory; with `requires`,
  // only where that file is in it.
  const answering = (requires?: string) =>
    [
      `import archive from ${JSON.stringify(natives.archive)} with { type: "file" };`,
      `import { installNatives } from ${JSON.stringify(cacheModule)};`,
      ...(requires === undefined ? [] : [`import { existsSync } from "node:fs";`]),
      `export function getBinsDir() {`,
      `  const binsDir = installNatives({ archive, id: ${JSON.stringify(natives.id)} });`,
      `  const answer = { binsDir, packageVersion: ${JSON.stringify(NODE_LLAMA_CPP_VERSION)} };`,
      requires === undefined ? `  return answer;` : `  return existsSync(binsDir + ${JSON.stringify(requires)}) ? answer : {};`,
      `}`,
    ].join("\n");
  const embedded = answering();
  const embeddedPackages = new Set(natives.folders.map((folder) => PACKAGE_OF_FOLDER[folder]));
  // Without embedded CUDA natives, the CUDA package answers with a CUDA build placed beside the
  // unpacked natives (`<PARLEY_NATIVES_DIR>/<id>/linux-x64-cuda/`), if one is: how a GPU machine
  // gets an executable too large to send with them (bench/gpu/run.sh), or an operator one compiled elsewhere.
  const beside = answering(`/${CUDA_FOLDER}/llama-addon.node`);
  const contents = (path: string) => {
    if (embeddedPackages.has(path)) return embedded;
    return path === PACKAGE_OF_FOLDER[CUDA_FOLDER] ? beside : "export function getBinsDir() { return {}; }";
  };

  return {
    name: "parley-natives",
    setup(build) {
      build.onResolve({ filter: /^@node-llama-cpp\// }, ({ path }) => ({ path, namespace: NAMESPACE }));
      build.onLoad({ filter: /.*/, namespace: NAMESPACE }, ({ path }) => ({
        loader: "js",
        contents: contents(path),
      }));
      for (const patch of patches) {
        build.onLoad({ filter: patch.file }, async ({ path }) => {
          const source = await Bun.file(path).text();
          const count = source.split(patch.find).length - 1;
          if (count !== 1) throw new Error(`natives plugin: expected "${patch.find}" once in ${path}, found it ${count} times`);
          applied.add(patch);
          return { loader: "js", contents: source.replace(patch.find, () => patch.replace) };
        });
      }
      build.onEnd((result) => {
        // A failed build reports its own errors; files after the failure were never loaded.
        if (!result.success) return;
        const missed = patches.filter((patch) => !applied.has(patch));
        if (missed.length > 0) {
          throw new Error(`natives plugin: never saw the file to patch for: ${missed.map((patch) => `${patch.file} (${patch.why})`).join("; ")}`);
        }
      });
    },
  };
}
