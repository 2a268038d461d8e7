/** Scratch space: fresh temp directories, and generated models written once per process. */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type FileType, type ModelPreset, PRESET_FILE_TYPES, writePresetModel } from "../../src/llm/gguf/presets";

export const tempDir = (label: string) => mkdtempSync(join(tmpdir(), `parley-${label}-`));

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
