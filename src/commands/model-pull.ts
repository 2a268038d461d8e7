// `parley model pull`: downloads a GGUF file with node-llama-cpp's downloader (parallel ranged
// requests, resumable), shows progress, and keeps the file only if describeGguf accepts it.

import { existsSync, statSync } from "node:fs";
import { rm } from "node:fs/promises";
import { basename, dirname } from "node:path";
import { createModelDownloader, type ModelDownloader } from "node-llama-cpp";
import { describeGguf, InvalidModelError, type ModelDescription } from "../gguf/describe";
import { progressReporter } from "./progress";
import { formatBytes } from "./units";

const PREFLIGHT_TIMEOUT_MS = 10_000;

export async function pullModel(uri: string, out: string | undefined, modelsDir: string): Promise<number> {
  const fail = (reason: string): number => {
    console.error(`parley model pull: ${reason}`);
    return 1;
  };
  const unreachable = await preflight(uri);
  if (unreachable !== undefined) {
    return fail(`cannot reach ${unreachable}; pulling needs a network (on an offline machine, copy the .gguf file into ${modelsDir} instead)`);
  }

  const progress = progressReporter();
  let downloader: ModelDownloader;
  try {
    downloader = await createModelDownloader({
      modelUri: uri,
      ...destination(out, modelsDir),
      skipExisting: true,
      // Kept so that running the same command again resumes instead of starting over.
      deleteTempFileOnCancel: false,
      onProgress: ({ downloadedSize, totalSize }) => progress.update(downloadedSize, totalSize),
    });
  } catch (err) {
    return fail(`download failed: ${firstLine(err)}`);
  }
  const target = downloader.entrypointFilePath;
  const total = downloader.totalSize;
  const skipped = existsSync(target) && statSync(target).size === total && downloader.downloadedSize === total;
  if (skipped) {
    console.error(`${target} is already there (${formatBytes(total)}); delete it to download again`);
  } else {
    const size = total > 0 ? ` (${formatBytes(total)}${downloader.downloadedSize > 0 ? `, resuming at ${formatBytes(downloader.downloadedSize)}` : ""})` : "";
    console.error(`Downloading ${uri} to ${target}${size}`);
    let interrupted = false;
    // A request still waiting for response headers cannot be cancelled; the handlers are
    // `once`, so a second signal ends the process at once (the partial file stays resumable).
    const interrupt = () => {
      interrupted = true;
      progress.end();
      console.error("Stopping (once more to quit at once)…");
      void downloader.cancel({ deleteTempFile: false });
    };
    process.once("SIGINT", interrupt).once("SIGTERM", interrupt);
    try {
      await downloader.download();
    } catch (err) {
      const resumable = downloader.downloadedSize > 0 ? " (run the same command again to resume)" : "";
      return fail(`download failed: ${firstLine(err)}${resumable}`);
    } finally {
      progress.end();
      process.off("SIGINT", interrupt).off("SIGTERM", interrupt);
    }
    // A cancelled download resolves like a finished one.
    if (interrupted) return fail("interrupted; the partial download is kept: run the same command again to resume");
  }

  // A split model arrives as several files; each must be whole.
  const files = downloader.filesInfo.map((file) => file.filePath);
  let model: ModelDescription;
  try {
    model = files.map((file) => describeGguf(file)).find((described) => described.path === target) ?? describeGguf(target);
  } catch (err) {
    if (!(err instanceof InvalidModelError)) throw err;
    if (skipped) return fail(err.message);
    await Promise.all(files.map((file) => rm(file, { force: true })));
    return fail(`${err.message}; the download was removed`);
  }
  console.log(`${target}: ${model.name} (${model.architecture ?? "unknown architecture"}, ${model.quantization}, ${formatBytes(model.sizeBytes)})`);
  return 0;
}

/** `--out` naming a .gguf file sets the file name; anything else is a directory. */
function destination(out: string | undefined, modelsDir: string): { dirPath: string; fileName?: string } {
  if (out === undefined) return { dirPath: modelsDir };
  const isDir = out.endsWith("/") || (existsSync(out) && statSync(out).isDirectory());
  return !isDir && out.toLowerCase().endsWith(".gguf") ? { dirPath: dirname(out), fileName: basename(out) } : { dirPath: out };
}

/**
 * The downloader retries a failed connection for minutes (its retry policy is not configurable
 * through node-llama-cpp), so an offline machine would seem to hang. One quick request to the
 * host first turns that into an immediate error; any HTTP answer at all counts as reachable.
 * Returns the unreachable host, or undefined.
 */
async function preflight(uri: string): Promise<string | undefined> {
  // hf: URIs resolve against the Hugging Face endpoint node-llama-cpp uses (same variables).
  const url = /^hf:/i.test(uri) ? Bun.env.MODEL_ENDPOINT || Bun.env.HF_ENDPOINT || "https://huggingface.co/" : uri;
  try {
    await fetch(url, { method: "HEAD", redirect: "manual", signal: AbortSignal.timeout(PREFLIGHT_TIMEOUT_MS) });
    return undefined;
  } catch (err) {
    return `${URL.canParse(url) ? new URL(url).host : url} (${firstLine(err)})`;
  }
}

function firstLine(err: unknown): string {
  // ipull's HTTP errors carry the status; their message also repeats the URL.
  const { statusCode, statusText } = (err ?? {}) as { statusCode?: unknown; statusText?: unknown };
  if (typeof statusCode === "number") return `HTTP ${statusCode}${statusText ? ` ${String(statusText)}` : ""}`;
  return (err instanceof Error ? err.message : String(err)).split("\n")[0]!;
}
