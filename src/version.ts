/**
 * `parley --version`: Parley's version, node-llama-cpp's, and the llama.cpp release its CPU natives
 * were built from. The release comes from the natives' build metadata instead of loading them, so the
 * answer also comes on a host where they cannot load (which is when an operator asks).
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { getModuleVersion } from "node-llama-cpp";
import pkg from "../package.json";

interface BuildMetadata {
  buildOptions: { llamaCpp: { repo: string; release: string } };
}

export async function versionText(): Promise<string> {
  return `parley ${pkg.version} (node-llama-cpp ${await getModuleVersion()}, llama.cpp ${await llamaCppRelease()})`;
}

async function llamaCppRelease(): Promise<string> {
  try {
    // In the single executable this is the build's embedded copy (src/natives/embed-plugin.ts).
    const { getBinsDir } = process.arch === "arm64" ? await import("@node-llama-cpp/linux-arm64") : await import("@node-llama-cpp/linux-x64");
    const { binsDir } = getBinsDir();
    if (binsDir === undefined) return "unknown";
    const metadata = JSON.parse(await readFile(join(binsDir, `linux-${process.arch}`, "_nlcBuildMetadata.json"), "utf8")) as BuildMetadata;
    return `${metadata.buildOptions.llamaCpp.release} from ${metadata.buildOptions.llamaCpp.repo}`;
  } catch (err) {
    return `unknown (${err instanceof Error ? err.message : String(err)})`;
  }
}
