/**
 * Which GGUF file the engine loads: an explicit path, else the first `.gguf` in the models
 * directory, else the built-in demo model (written on first use so a fresh checkout answers).
 */
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { DEMO_FINGERPRINT_KEY, demoFingerprint } from "../gguf/demo";
import { DEMO_MODEL_NAME, writePresetModel } from "../gguf/presets";
import { readGgufHeader } from "../gguf/reader";

export interface ModelSource {
  modelPath?: string;
  modelsDir: string;
}

export interface ResolvedModel {
  path: string;
  /** True when no model was configured or found and the demo model is used instead. */
  demo: boolean;
}

const DEMO_FILE = `${DEMO_MODEL_NAME}.gguf`;

export class ModelNotFoundError extends Error {
  override name = "ModelNotFoundError";
}

export async function resolveModel({ modelPath, modelsDir }: ModelSource): Promise<ResolvedModel> {
  if (modelPath !== undefined && modelPath !== "") {
    if (!(await isFile(modelPath))) {
      throw new ModelNotFoundError(`PARLEY_MODEL (--model) is "${modelPath}", which is not a readable file`);
    }
    return { path: modelPath, demo: false };
  }

  const found = await firstGguf(modelsDir);
  if (found !== undefined) return { path: found, demo: false };

  // Written when missing or made by another version of the demo (its fingerprint differs), so it
  // always matches this build; writePresetModel replaces the file atomically, so a concurrent start
  // never reads half of it.
  const path = join(modelsDir, DEMO_FILE);
  if (!isCurrentDemo(path)) await writePresetModel("demo", path);
  return { path, demo: true };
}

function isCurrentDemo(path: string): boolean {
  try {
    const stamp = readGgufHeader(path).metadata[DEMO_FINGERPRINT_KEY];
    return stamp?.type === "string" && stamp.value === demoFingerprint();
  } catch {
    return false;
  }
}

async function firstGguf(dir: string): Promise<string | undefined> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
  // The demo file left by an earlier start is not a configured model. Plain code-point order,
  // so the choice does not depend on the machine's locale.
  const candidates = names.filter((n) => n.toLowerCase().endsWith(".gguf") && n !== DEMO_FILE).sort();
  for (const name of candidates) {
    const path = join(dir, name);
    if (await isFile(path)) return path;
  }
  return undefined;
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}
