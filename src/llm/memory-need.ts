/**
 * What a model takes in memory before it is loaded, so that a load that cannot fit is refused with
 * the figures rather than ended by the kernel's OOM killer: its weights (the file, mapped) and its
 * KV cache (every sequence's context, its keys and values of `PARLEY_KV_TYPE`), and a margin for llama.cpp's compute
 * buffers. An estimate from the GGUF header: a model whose header lacks the attention sizes counts
 * its weights only. Layers offloaded to a GPU take their weights and KV cache out of RAM (llama.cpp
 * keeps an offloaded layer's cache beside it; the output layer counts as one more); the GPU's own
 * memory is checked by node-llama-cpp when the model loads (llama-load.ts).
 */
import { readFileSync } from "node:fs";
import { freemem } from "node:os";
import { Overloaded } from "../errors";
import { integer, type ModelDescription } from "../gguf/describe";
import type { KvType } from "./types";

const COMPUTE_MARGIN_BYTES = 64 * 2 ** 20;
/** Bytes a cached key or value element takes: 16 bits, or ggml's blocks of 32 (a 16-bit scale and 32 8- or 4-bit values). */
const KV_BYTES_PER_VALUE: Readonly<Record<KvType, number>> = { f16: 2, q8_0: 34 / 32, q4_0: 18 / 32 };

/** Layers given to a GPU: a count, or all of them. */
export type GpuLayers = number | "all";

export function memoryNeed(model: ModelDescription, contextSize: number, sequences: number, kvType: KvType = "f16", gpuLayers: GpuLayers = 0): number {
  const arch = model.architecture;
  const of = (key: string) => (arch === undefined ? undefined : integer(model.metadata[`${arch}.${key}`]));
  const [layers, width, heads] = [of("block_count"), of("embedding_length"), of("attention.head_count")];
  if (gpuLayers === "all") return COMPUTE_MARGIN_BYTES;
  const onCpu = (share: number) => Math.max(0, 1 - share);
  const weights = model.sizeBytes * (layers === undefined ? (gpuLayers > 0 ? 0 : 1) : onCpu(gpuLayers / (layers + 1)));
  if (layers === undefined || width === undefined || heads === undefined || heads === 0) return weights + COMPUTE_MARGIN_BYTES;
  const kvHeads = of("attention.head_count_kv") ?? heads;
  const keyWidth = (of("attention.key_length") ?? width / heads) * kvHeads;
  const valueWidth = (of("attention.value_length") ?? width / heads) * kvHeads;
  const kvBytes = contextSize * sequences * layers * (keyWidth + valueWidth) * KV_BYTES_PER_VALUE[kvType];
  return weights + kvBytes * onCpu(gpuLayers / layers) + COMPUTE_MARGIN_BYTES;
}

/**
 * The model as its load takes memory with its projector (a vision model's mmproj file) beside it:
 * llama.cpp's mtmd loads the projector's weights where the model's layers go, so they count as
 * the model's.
 */
export const withProjector = (model: ModelDescription, projectorBytes: number): ModelDescription => ({ ...model, sizeBytes: model.sizeBytes + projectorBytes });

const mib = (bytes: number) => Math.ceil(bytes / 2 ** 20);

/** Refuses (`Overloaded`, with the figures) a load of `model` that `available` bytes of RAM cannot hold. */
export function refuseUnlessFits(
  model: ModelDescription,
  contextSize: number,
  sequences: number,
  kvType: KvType = "f16",
  gpuLayers: GpuLayers = 0,
  available = availableMemory(),
): void {
  const need = memoryNeed(model, contextSize, sequences, kvType, gpuLayers);
  if (need <= available) return;
  throw new Overloaded(
    `the model ${model.name} needs about ${mib(need)} MiB of RAM (its weights and KV cache${gpuLayers === 0 ? "" : " not on the GPU"}), and ${mib(available)} MiB of memory are available: it is not loaded`,
    30_000,
  );
}

/** Memory the system can give without swapping: Linux's MemAvailable, else the free memory. */
function availableMemory(): number {
  try {
    const kib = /^MemAvailable:\s+(\d+) kB$/m.exec(readFileSync("/proc/meminfo", "utf8"))?.[1];
    if (kib !== undefined) return Number(kib) * 1024;
  } catch {}
  return freemem();
}
