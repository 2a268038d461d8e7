/**
 * The models a service answers from, as turns ask for them: a request's `model` resolved in the
 * registry (an unknown one is `ModelNotFound`), its engine held from the models in memory.
 */
import type { Engine } from "../llm/engine";
import { forgetSaved } from "../llm/kv-store";
import type { HeldEngine, LoadedModels } from "../llm/loaded-models";
import type { ModelRegistry } from "../llm/model";
import { type EngineSource, type ModelFile, type ModelInfo, modelLoading } from "./turn-runner";

export class ServedModels implements EngineSource {
  constructor(
    private readonly registry: ModelRegistry,
    private readonly memory: LoadedModels,
    /** False until the default model's first load has ended: turns are refused (503) until then. */
    private readonly ready: () => boolean,
    /** Where the models' KV states are saved, if anywhere. */
    private readonly kvRoot?: string,
  ) {}

  async hold(model: string | undefined, signal?: AbortSignal): Promise<HeldEngine> {
    if (!this.ready()) throw modelLoading();
    return this.memory.hold(this.registry.resolve(model), signal);
  }

  loaded(): readonly Engine[] {
    return this.memory.engines();
  }

  /** The loaded models forget it (their sequences, their states), then every model's saved state goes. */
  async forget(conversationKey: string): Promise<void> {
    for (const engine of this.memory.engines()) await engine.forget(conversationKey);
    if (this.kvRoot !== undefined) await forgetSaved(this.kvRoot, conversationKey);
  }

  /** Read afresh: a file added to the models directory is listed (and served) at once. */
  list(): ModelInfo[] {
    this.registry.rescan();
    return this.registry.models.map(({ id, created, description }) => {
      const template = description.metadata["tokenizer.chat_template"];
      const file: ModelFile = {
        ...(description.architecture !== undefined ? { architecture: description.architecture } : {}),
        sizeBytes: description.sizeBytes,
        quantization: description.quantization,
        parameters: description.parameters,
        ...(template?.type === "string" ? { chatTemplate: template.value } : {}),
      };
      return { id, created, loaded: this.memory.isLoaded(id), file };
    });
  }
}
