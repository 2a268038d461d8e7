/**
 * Loading a model file into llama.cpp, as every engine of Parley's does: the natives chosen (Parley's
 * compiled ones when present), the model's weights, and the threads its decodes get.
 */
import { getLlama, getModuleVersion, type Llama, type LlamaModel } from "node-llama-cpp";
import { IN_EXECUTABLE, useLocalNatives } from "../natives/local";
import { checkNodeLlamaCppVersion } from "../natives/version";

export interface LoadOptions {
  modelPath: string;
  /** CPU threads. Default: 1 for tiny models, else llama.cpp's count of math cores (see `defaultThreads`). */
  threads?: number;
  /** Default false: CPU only. */
  gpu?: boolean;
  /** Use `bun run natives`' build when present (default true); false forces the npm prebuilt. */
  localNatives?: boolean;
}

export interface LoadedLlama {
  llama: Llama;
  model: LlamaModel;
  threads: number;
  /** Which natives decode: a local build's name, "embedded" or "prebuilt". */
  natives: string;
}

/** The model loaded; on failure nothing stays loaded. Dispose of `llama` to unload it. */
export async function loadLlamaModel(options: LoadOptions): Promise<LoadedLlama> {
  const { modelPath, gpu = false } = options;
  checkNodeLlamaCppVersion(await getModuleVersion(), "loading the model");
  const natives = options.localNatives === false ? undefined : await useLocalNatives();
  const llama = await getLlama({ gpu: gpu ? "auto" : false, build: gpu ? "auto" : "never" });
  try {
    const model = await llama.loadModel({ modelPath, gpuLayers: gpu ? "auto" : 0 });
    const threads = options.threads ?? defaultThreads(llama, model);
    llama.maxThreads = threads;
    return { llama, model, threads, natives: natives ?? (IN_EXECUTABLE ? "embedded" : "prebuilt") };
  } catch (error) {
    await llama.dispose();
    throw error;
  }
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
