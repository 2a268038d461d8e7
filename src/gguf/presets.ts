// The models Parley can generate for itself (there is no network to download one).

import { randomUUID } from "node:crypto";
import { mkdir, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { BENCH_1B_HPARAMS, BENCH_DRAFT_HPARAMS, BENCH_FILE_TYPES, BENCH_HPARAMS, BENCH_MODEL_NAME, type BenchFileType, benchGguf } from "./bench";
import { demoGguf } from "./demo";
import { FAMILY_PRESETS, type FamilyPreset, familyGguf } from "./families";
import type { FileType } from "./file-type";
import { RETRIEVAL_PRESETS, type RetrievalPreset, retrievalGguf } from "./retrieval";
import type { GgufValue } from "./values";
import { projectorFileName, projectorGguf } from "./vision";
import { type GgufFile, writeGguf } from "./writer";

/**
 * The vision preset: bench-draft's shape under its own name (random weights of bench-small's
 * vocabulary, 4 layers of width 256), with a projector (`mmproj-<file>`, vision.ts) written beside.
 */
export const VISION_MODEL_NAME = "parley-vision";

export { DEMO_MODEL_NAME } from "./demo";
export type { FileType } from "./file-type";

export type ModelPreset = "demo" | "bench-small" | "bench-draft" | "bench-1b" | "vision" | FamilyPreset | RetrievalPreset;

export const MODEL_PRESETS: readonly ModelPreset[] = ["demo", "bench-small", "bench-draft", "bench-1b", "vision", ...FAMILY_PRESETS, ...RETRIEVAL_PRESETS];

const isFamily = (preset: ModelPreset): preset is FamilyPreset => (FAMILY_PRESETS as readonly string[]).includes(preset);

/**
 * The file types each preset is written in, its default first. The bigram models (the demo and
 * the families) stay F32: their greedy replies rest on logits 0.001 apart, which a quantized
 * output matrix would merge.
 */
export const PRESET_FILE_TYPES: Readonly<Record<ModelPreset, readonly FileType[]>> = {
  demo: ["F32"],
  "bench-small": BENCH_FILE_TYPES,
  "bench-draft": ["F16"],
  "bench-1b": ["F16", "Q4_0"],
  vision: ["F16"],
  llama3: ["F32"],
  qwen2: ["F32"],
  gemma: ["F32"],
  mistral: ["F32"],
  phi3: ["F32"],
  "qwen3-thinking": ["F32"],
  "qwen2-coder": ["F32"],
  embed: ["F16"],
  rerank: ["F16"],
};

/** A file type as llama-quantize's command line names it (f16, q8_0, q4_0), absent for the default; undefined if the preset is not written in it. */
export function presetFileType(preset: ModelPreset, name?: string): FileType | undefined {
  const types = PRESET_FILE_TYPES[preset];
  return name === undefined ? types[0] : types.find((t) => t === name.toUpperCase());
}

/**
 * `<stem>` in the preset's default type, else `<stem>-Q4_0`, as llama.cpp names files: a preset's
 * file name without `.gguf`, and its model's name (`general.name`, the id it is served by), so
 * that the types of one preset side by side are models of their own.
 */
function typedName(stem: string, preset: ModelPreset, fileType: FileType): string {
  return `${stem}${fileType === PRESET_FILE_TYPES[preset][0] ? "" : `-${fileType}`}`;
}

export const presetFileName = (stem: string, preset: ModelPreset, fileType: FileType): string => `${typedName(stem, preset, fileType)}.gguf`;

/**
 * Whether Parley generated the model: each preset carries keys of its own under `parley.` (the
 * demo's fingerprint, `parley.random_weights`, `parley.family`). Such a model is served by its id,
 * but never becomes the default on its own: it is no operator's real model.
 */
export const isGenerated = (metadata: Readonly<Record<string, GgufValue>>): boolean => Object.keys(metadata).some((key) => key.startsWith("parley."));

function presetGguf(preset: ModelPreset, fileType: FileType): GgufFile {
  if (!PRESET_FILE_TYPES[preset].includes(fileType)) throw new Error(`the ${preset} model is not written as ${fileType}`);
  if (isFamily(preset)) return familyGguf(preset);
  switch (preset) {
    case "demo":
      return demoGguf();
    case "bench-small":
      return benchGguf(fileType as BenchFileType, { name: typedName(BENCH_MODEL_NAME, preset, fileType), hparams: BENCH_HPARAMS });
    case "bench-draft":
      return benchGguf("F16", { name: "parley-bench-draft", hparams: BENCH_DRAFT_HPARAMS });
    case "bench-1b":
      return benchGguf(fileType as BenchFileType, { name: typedName("parley-bench-1b", preset, fileType), hparams: BENCH_1B_HPARAMS });
    case "vision":
      return benchGguf("F16", { name: VISION_MODEL_NAME, hparams: BENCH_DRAFT_HPARAMS });
    case "embed":
    case "rerank":
      return retrievalGguf(preset);
  }
}

/**
 * Writes the preset to `outPath`, creating parent directories. The file appears complete or
 * not at all: it is written under a unique temporary name in the same directory and renamed,
 * so concurrent writers (and readers) never see a partial model.
 */
export async function writePresetModel(preset: ModelPreset, outPath: string, fileType = PRESET_FILE_TYPES[preset][0]!): Promise<void> {
  // The projector first: a server that sees the model sees its projector too.
  if (preset === "vision")
    await writeWhole(join(dirname(outPath), projectorFileName(basename(outPath))), projectorGguf(VISION_MODEL_NAME, BENCH_DRAFT_HPARAMS.nEmbd));
  await writeWhole(outPath, presetGguf(preset, fileType));
}

async function writeWhole(outPath: string, file: GgufFile): Promise<void> {
  const dir = dirname(outPath);
  await mkdir(dir, { recursive: true });
  const tmp = join(dir, `.${basename(outPath)}.${randomUUID()}.tmp`);
  try {
    await writeGguf(tmp, file);
    await rename(tmp, outPath);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}
