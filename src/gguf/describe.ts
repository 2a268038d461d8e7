// Describes a GGUF model from its header alone, and refuses a file llama.cpp could not load
// with one line an operator can act on: the server checks its model with this at start-up
// (a bad file would otherwise end in a native abort or a stack trace), and `parley model`
// list/info/pull judge files the same way. Tensor data is never read, only its extent.

import { closeSync, openSync, readSync, statSync } from "node:fs";
import { basename } from "node:path";
import { type GgufTensorInfo, readGgufHeader } from "./reader";
import { FILE_TYPE_NAMES, GGML_TYPES } from "./tensor-types";
import type { GgufValue } from "./values";
import { GGUF_MAGIC } from "./writer";

export class InvalidModelError extends Error {
  override name = "InvalidModelError";

  /** `reason` is the message without the path, for listings that already show the file. */
  constructor(
    readonly path: string,
    readonly reason: string,
  ) {
    super(`${path}: ${reason}`);
  }
}

export interface ModelDescription {
  readonly path: string;
  /** `general.name`, else the file name without `.gguf`. */
  readonly name: string;
  readonly architecture: string | undefined;
  readonly sizeBytes: number;
  /** `<architecture>.context_length`: the context the model was trained for. */
  readonly contextLength: number | undefined;
  /** llama-quantize's name for `general.file_type` (e.g. Q4_K_M); without that key, the ggml type holding most parameters (e.g. Q4_K). */
  readonly quantization: string;
  readonly parameters: number;
  readonly tensors: number;
  readonly ggufVersion: number;
  readonly metadata: Readonly<Record<string, GgufValue>>;
  /**
   * What the model is for: replies, or its input pooled into a vector (`embedding`) or into a
   * relevance score (`ranking`), as its `<architecture>.pooling_type` declares (llama.cpp pools
   * by it); an encoder-only architecture cannot reply whatever it declares.
   */
  readonly purpose: ModelPurpose;
}

export type ModelPurpose = "chat" | "embedding" | "ranking";

/** llama.cpp's `llama_pooling_type` values, as `<arch>.pooling_type` holds them. */
export const POOLING = { none: 0, mean: 1, cls: 2, last: 3, rank: 4 } as const;
const ENCODERS = new Set(["bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "modern-bert", "neo-bert", "t5encoder"]);

function purposeOf(architecture: string | undefined, metadata: Readonly<Record<string, GgufValue>>): ModelPurpose {
  const pooling = architecture === undefined ? undefined : integer(metadata[`${architecture}.pooling_type`]);
  if (pooling === POOLING.rank) return "ranking";
  return (pooling ?? 0) > 0 || ENCODERS.has(architecture ?? "") ? "embedding" : "chat";
}

export function describeGguf(path: string): ModelDescription {
  const sizeBytes = fileSize(path);
  checkPreamble(path, sizeBytes);
  let header: ReturnType<typeof readGgufHeader>;
  try {
    header = readGgufHeader(path);
  } catch (err) {
    throw new InvalidModelError(path, headerProblem(err));
  }
  const { metadata, tensors, dataOffset, version } = header;
  // The first file of a split model may carry only metadata (gguf-split --no-tensor-first-split).
  if (tensors.length === 0 && (integer(metadata["split.count"]) ?? 1) <= 1) {
    throw new InvalidModelError(path, "holds no tensors, so it is not a model (a vocabulary-only file?)");
  }
  const dataEnd = dataOffset + tensors.reduce((end, t) => Math.max(end, tensorEnd(path, t)), 0);
  if (dataEnd > sizeBytes) {
    throw new InvalidModelError(
      path,
      `is truncated: its tensor data ends at byte ${dataEnd} but the file has only ${sizeBytes} bytes (an interrupted download or copy?)`,
    );
  }

  const architecture = text(metadata["general.architecture"]);
  return {
    path,
    name: text(metadata["general.name"]) ?? basename(path).replace(/\.gguf$/i, ""),
    architecture,
    sizeBytes,
    contextLength: architecture === undefined ? undefined : integer(metadata[`${architecture}.context_length`]),
    quantization: quantization(metadata, tensors),
    parameters: tensors.reduce((n, t) => n + elements(t), 0),
    tensors: tensors.length,
    ggufVersion: version,
    metadata,
    purpose: purposeOf(architecture, metadata),
  };
}

/** A projector's architecture (llama.cpp's mtmd loads it beside its model, never as a model of its own). */
export const PROJECTOR_ARCHITECTURE = "clip";

/** What a projector's header says: how it sees, and the width of what it hands its model. */
export interface ProjectorDescription {
  /** `clip.projector_type`, e.g. mlp (LLaVA), gemma3, qwen2.5vl_merger. */
  readonly type: string;
  readonly vision?: { imageSize: number | undefined; patchSize: number | undefined; blocks: number | undefined; width: number | undefined };
  readonly audio: boolean;
  /** `clip.vision.projection_dim`: its model's embedding length. */
  readonly outputWidth: number | undefined;
}

/** The projector a file is (architecture `clip`), else undefined. */
export function projectorOf({ architecture, metadata }: Pick<ModelDescription, "architecture" | "metadata">): ProjectorDescription | undefined {
  if (architecture !== PROJECTOR_ARCHITECTURE) return undefined;
  const clip = (key: string) => metadata[`clip.${key}`];
  const flag = (key: string) => {
    const value = clip(key);
    return value?.type === "bool" && value.value;
  };
  // Without the flags (older LLaVA conversions) a projector has a vision encoder; without a type, llama.cpp reads it as mlp.
  const vision = flag("has_vision_encoder") || !flag("has_audio_encoder");
  return {
    type: text(clip("projector_type")) ?? text(clip("vision.projector_type")) ?? text(clip("audio.projector_type")) ?? "mlp",
    ...(vision
      ? {
          vision: {
            imageSize: integer(clip("vision.image_size")),
            patchSize: integer(clip("vision.patch_size")),
            blocks: integer(clip("vision.block_count")),
            width: integer(clip("vision.embedding_length")),
          },
        }
      : {}),
    audio: flag("has_audio_encoder"),
    outputWidth: integer(clip("vision.projection_dim")) ?? integer(clip("audio.projection_dim")),
  };
}

/** Turns the reader's error into a reason; a length past the end may be either damage or a cut. */
function headerProblem(err: unknown): string {
  const detail = (err instanceof Error ? err.message : String(err)).split("\n")[0]!;
  const cut = /^GGUF file truncated at byte (\d+)/.exec(detail);
  if (cut) return `is truncated: the file ends inside its GGUF header, at byte ${cut[1]}`;
  const long = /^GGUF length (\d+) at byte (\d+) exceeds the file/.exec(detail);
  if (long) return `is truncated or has a corrupt GGUF header (a length of ${long[1]} at byte ${long[2]} runs past the end of the file)`;
  return `has a corrupt GGUF header (${detail})`;
}

function fileSize(path: string): number {
  let stats: ReturnType<typeof statSync>;
  try {
    stats = statSync(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new InvalidModelError(path, code === "ENOENT" ? "no such file" : `cannot be read (${code ?? String(err)})`);
  }
  if (stats.isDirectory()) throw new InvalidModelError(path, "is a directory, not a GGUF file");
  if (!stats.isFile()) throw new InvalidModelError(path, "is not a regular file");
  if (stats.size === 0) throw new InvalidModelError(path, "is empty (0 bytes)");
  return stats.size;
}

/** Magic and version get their own messages: they say "wrong kind of file", not "damaged". */
function checkPreamble(path: string, size: number): void {
  const head = new Uint8Array(8);
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (err) {
    throw new InvalidModelError(path, `cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  try {
    readSync(fd, head, 0, head.length, 0);
  } finally {
    closeSync(fd);
  }
  const view = new DataView(head.buffer);
  if (size < 4 || view.getUint32(0, true) !== GGUF_MAGIC) {
    throw new InvalidModelError(path, `is not a GGUF file (it starts with ${preview(head.subarray(0, Math.min(size, 4)))}, not "GGUF")`);
  }
  if (size < 8) throw new InvalidModelError(path, `is truncated: the file ends inside its GGUF header, at byte ${size}`);
  const version = view.getUint32(4, true);
  if (version !== 2 && version !== 3) {
    throw new InvalidModelError(path, `uses GGUF version ${version}; only versions 2 and 3 are supported`);
  }
}

/** Text as text (an HTML error page shows as "<!DO"), anything else as hex. */
function preview(bytes: Uint8Array): string {
  if (bytes.every((b) => b >= 0x20 && b < 0x7f)) return JSON.stringify(new TextDecoder("latin1").decode(bytes));
  return `0x${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

const elements = (t: GgufTensorInfo): number => t.shape.reduce((n, d) => n * d, 1);

/** End of the tensor's bytes relative to the data section; an unknown type only counts its offset. */
function tensorEnd(path: string, t: GgufTensorInfo): number {
  const type = GGML_TYPES.get(t.typeId);
  if (type === undefined) return t.offset;
  const [rowLength = 1, ...rest] = t.shape;
  if (rowLength % type.blockSize !== 0) {
    throw new InvalidModelError(
      path,
      `has a corrupt GGUF header (tensor ${t.name} has rows of ${rowLength} ${type.name} values, not a multiple of its block size ${type.blockSize})`,
    );
  }
  const end = t.offset + (rowLength / type.blockSize) * type.bytesPerBlock * rest.reduce((n, d) => n * d, 1);
  if (!Number.isSafeInteger(end)) throw new InvalidModelError(path, `has a corrupt GGUF header (tensor ${t.name} is larger than any file)`);
  return end;
}

function quantization(metadata: Readonly<Record<string, GgufValue>>, tensors: readonly GgufTensorInfo[]): string {
  const fileType = integer(metadata["general.file_type"]);
  if (fileType !== undefined) return FILE_TYPE_NAMES.get(fileType) ?? `unknown (file_type ${fileType})`;
  // Weighted by parameters, not by tensor count as llama.cpp guesses: the many small F32
  // norm vectors should not outvote the quantised matrices.
  const byType = new Map<string, number>();
  for (const t of tensors) {
    const name = GGML_TYPES.get(t.typeId)?.name ?? `type ${t.typeId}`;
    byType.set(name, (byType.get(name) ?? 0) + elements(t));
  }
  return [...byType].reduce((best, entry) => (entry[1] > best[1] ? entry : best), ["unknown", -1])[0];
}

function text(value: GgufValue | undefined): string | undefined {
  return value?.type === "string" && value.value !== "" ? value.value : undefined;
}

export function integer(value: GgufValue | undefined): number | undefined {
  if (value === undefined || value.type === "array" || value.type === "string" || value.type === "bool") return undefined;
  const n = Number(value.value);
  return Number.isSafeInteger(n) ? n : undefined;
}
