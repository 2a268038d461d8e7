/**
 * Loading a model file into llama.cpp, as every engine of Parley's does: the natives chosen (Parley's
 * compiled ones when present), the device (the CPU, or a GPU when asked for and usable), the model's
 * weights, and the threads its decodes get.
 */
import { basename } from "node:path";
import { getLlama, getModuleVersion, InsufficientMemoryError, type Llama, type LlamaModel } from "node-llama-cpp";
import { Overloaded } from "../errors";
import { missingCudaLibraries } from "../natives/cuda-runtime";
import { cudaNativesMissing, IN_EXECUTABLE, useLocalNatives } from "../natives/local";
import { checkNodeLlamaCppVersion } from "../natives/version";
import type { GpuLayers } from "./memory-need";
import type { GpuBackend } from "./types";

export interface LoadOptions {
  modelPath: string;
  /** The id requests name the model by (the registry's); default its `general.name`, else its file name. */
  modelName?: string;
  /** CPU threads. Default: 1 for tiny models, else llama.cpp's count of math cores (see `defaultThreads`). */
  threads?: number;
  /** Default false: CPU only. Where the GPU is not usable, `onWarning` hears why and the CPU serves. */
  gpu?: GpuBackend | false;
  /** Layers offloaded with `gpu`; default all. */
  gpuLayers?: number;
  /** Use `bun run natives`' build when present (default true); false forces the npm prebuilt. */
  localNatives?: boolean;
  onWarning?: (message: string, error: unknown) => void;
  /**
   * Called once the device is known, before the weights load: throws to refuse a model that RAM
   * cannot hold beside what goes to the GPU (`memory-need.ts`).
   */
  fits?: (gpuLayers: GpuLayers) => void;
}

/** The name replies give the model: `modelName`, else the file's `general.name`, else its file name without `.gguf`. */
export function modelNameOf({ modelName, modelPath }: LoadOptions, model: LlamaModel): string {
  const name = model.fileInfo.metadata.general?.name;
  return modelName ?? (typeof name === "string" && name.trim() !== "" ? name : basename(modelPath).replace(/\.gguf$/i, ""));
}

export interface LoadedLlama {
  llama: Llama;
  model: LlamaModel;
  threads: number;
  /** Which natives decode: a local build's name, "embedded" or "prebuilt". */
  natives: string;
}

/** Where a loaded model runs: `cpu`, or the GPU's name with the layers and memory it took. */
export interface DeviceUse {
  device: string;
  gpuLayers?: number;
  /** GPU memory in use once the model and its context are loaded (every model's on that GPU). */
  vramBytes?: number;
}

/** The model loaded; on failure nothing stays loaded. Dispose of `llama` to unload it. */
export async function loadLlamaModel(options: LoadOptions): Promise<LoadedLlama> {
  const { modelPath, gpu = false } = options;
  checkNodeLlamaCppVersion(await getModuleVersion(), "loading the model");
  const natives = options.localNatives === false ? undefined : await useLocalNatives();
  const llama = await startLlama(gpu, options.localNatives !== false, options.onWarning);
  try {
    const offloaded = llama.gpu === false ? 0 : options.gpuLayers;
    options.fits?.(offloaded ?? "all");
    const model = await llama.loadModel({ modelPath, gpuLayers: offloaded ?? "max" }).catch(overloadedOnGpu(modelPath));
    const threads = options.threads ?? defaultThreads(llama, model);
    llama.maxThreads = threads;
    return { llama, model, threads, natives: natives ?? (IN_EXECUTABLE ? "embedded" : "prebuilt") };
  } catch (error) {
    await llama.dispose();
    throw error;
  }
}

/** Whether this process has said why it serves from the CPU: once is enough, every model loads alike. */
let toldNoGpu = false;

/** llama.cpp on the GPU asked for, else on the CPU after one warning saying why the GPU is not used. */
async function startLlama(gpu: GpuBackend | false, localNatives: boolean, onWarning?: (message: string, error: unknown) => void): Promise<Llama> {
  const tell = (why: string, error: unknown = why) => {
    if (!toldNoGpu) onWarning?.(`no GPU is used, the models run on the CPU: PARLEY_GPU=${gpu}, but ${why}`, error);
    toldNoGpu = true;
  };
  const cpu = (why: string, error?: unknown) => {
    tell(why, error);
    return getLlama({ gpu: false, build: "never" });
  };
  if (gpu === false) return getLlama({ gpu: false, build: "never" });
  const missing = localNatives ? ((await cudaNativesMissing()) ?? missingCudaLibraries()) : "the npm prebuilt natives were asked for";
  if (missing !== undefined) return cpu(missing);
  let llama: Llama;
  try {
    // Its own console lines would make the fallback's one line several.
    llama = await getLlama({ gpu, build: "never", progressLogs: false });
  } catch (error) {
    // The libraries were all found: what fails now is the device (none, or one the driver refuses).
    return cpu(`the ${gpu.toUpperCase()} natives found no usable GPU`, error);
  }
  if (llama.gpu !== false) return llama;
  // The natives loaded, but their GPU backend found no device (no driver, no GPU): they run on the CPU as they are.
  tell(`no ${gpu.toUpperCase()} device was found`);
  return llama;
}

/** node-llama-cpp refuses a model or context larger than the GPU's free memory: the same refusal as a RAM shortage's. */
export function overloadedOnGpu(modelPath: string): (error: unknown) => never {
  return (error) => {
    if (error instanceof InsufficientMemoryError) {
      throw new Overloaded(`the model ${modelPath} does not fit the GPU's free memory (${error.message}): it is not loaded`, 30_000);
    }
    throw error;
  };
}

/** Where `model` runs, read once it and its context are loaded. */
export async function deviceUse(llama: Llama, model: LlamaModel): Promise<DeviceUse> {
  if (llama.gpu === false) return { device: "cpu" };
  const [names, vram] = await Promise.all([llama.getGpuDeviceNames(), llama.getVramState()]);
  return { device: names.join(", ") || llama.gpu, gpuLayers: model.gpuLayers, vramBytes: vram.used };
}

/** Below this size a model's matrices are too small to split: thread hand-offs cost more than they save. */
const TINY_MODEL_BYTES = 32 * 1024 * 1024;

/**
 * llama.cpp's count of math cores (physical cores, no hyper-threads). A tiny model (the demo) runs
 * faster on one thread than on two, its matrices too small to split; real models gain from every core.
 */
function defaultThreads(llama: Llama, model: LlamaModel): number {
  return model.size < TINY_MODEL_BYTES ? 1 : Math.max(1, llama.cpuMathCores);
}
