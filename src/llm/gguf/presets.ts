// The models Parley can generate for itself (there is no network to download one).

import { randomUUID } from "node:crypto";
import { mkdir, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { benchGguf } from "./bench";
import { demoGguf } from "./demo";
import { writeGguf, type GgufFile } from "./writer";

export { DEMO_MODEL_NAME } from "./demo";

export type ModelPreset = "demo" | "bench-small";

export const MODEL_PRESETS: readonly ModelPreset[] = ["demo", "bench-small"];

function presetGguf(preset: ModelPreset): GgufFile {
  switch (preset) {
    case "demo": return demoGguf();
    case "bench-small": return benchGguf();
  }
}

/**
 * Writes the preset to `outPath`, creating parent directories. The file appears complete or
 * not at all: it is written under a unique temporary name in the same directory and renamed,
 * so concurrent writers (and readers) never see a partial model.
 */
export async function writePresetModel(preset: ModelPreset, outPath: string): Promise<void> {
  const dir = dirname(outPath);
  await mkdir(dir, { recursive: true });
  const tmp = join(dir, `.${basename(outPath)}.${randomUUID()}.tmp`);
  try {
    await writeGguf(tmp, presetGguf(preset));
    await rename(tmp, outPath);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}
