/** Scratch space: fresh temp directories, and generated models written once per process. */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type FileType, type ModelPreset, PRESET_FILE_TYPES, writePresetModel } from "../../src/gguf/presets";
import { atEndOfRun } from "./end-of-run";

/**
 * A fresh temp directory, removed at the end of the run. Left behind, each full run added ~0.7 GB
 * to /tmp (databases, KV states, models, PostgreSQL clusters), until the disk fell under the KV
 * cache's free-space reserve and states were no longer saved.
 */
export function tempDir(label: string): string {
  const dir = mkdtempSync(join(tmpdir(), `parley-${label}-`));
  atEndOfRun(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A file's sha256, hex: what the llama-server fixtures record of the models they were made on. */
export const fileSha256 = async (path: string) => new Bun.CryptoHasher("sha256").update(await Bun.file(path).arrayBuffer()).digest("hex");

const presetFiles = new Map<string, Promise<string>>();

/** A generated model (by default in its preset's default file type), written once per test process into a temp dir. */
export function presetModel(preset: ModelPreset, fileType: FileType = PRESET_FILE_TYPES[preset][0]!): Promise<string> {
  const key = `${preset}-${fileType}`;
  let file = presetFiles.get(key);
  if (!file) {
    const path = join(tempDir(`model-${key}`), `${key}.gguf`);
    file = writePresetModel(preset, path, fileType).then(() => path);
    presetFiles.set(key, file);
  }
  return file;
}
