/** Scratch space: fresh temp directories, and generated models written once per process. */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ModelPreset, writePresetModel } from "../../src/llm/gguf/presets";

export const tempDir = (label: string) => mkdtempSync(join(tmpdir(), `parley-${label}-`));

const presetFiles = new Map<ModelPreset, Promise<string>>();

/** A generated model, written once per test process into a temp dir. */
export function presetModel(preset: ModelPreset): Promise<string> {
  let file = presetFiles.get(preset);
  if (!file) {
    const path = join(tempDir(`model-${preset}`), `${preset}.gguf`);
    file = writePresetModel(preset, path).then(() => path);
    presetFiles.set(preset, file);
  }
  return file;
}
