/**
 * The models a service answers from, as turns ask for them: a request's `model` resolved in the
 * registry (an unknown one is `ModelNotFound`), its engine held from the models in memory.
 */
import { InvalidInput } from "../errors";
import type { ModelPurpose } from "../gguf/describe";
import { Embedder } from "../llm/embedder";
import { Engine } from "../llm/engine";
import { forgetSaved } from "../llm/kv-store";
import type { Held, HeldEngine, LoadedModels } from "../llm/loaded-models";
import type { ModelEntry, ModelRegistry } from "../llm/model";
import type { RetrievalPurpose, RetrievalSource } from "./retrieval";
import { type EngineSource, type ModelFile, type ModelInfo, modelLoading } from "./turn-runner";

/** A model in memory: a chat model's engine, or a retrieval model's. */
export type ServedEngine = Engine | Embedder;

const PURPOSES: Readonly<Record<ModelPurpose, string>> = { chat: "a chat model", embedding: "an embedding model", ranking: "a reranking model" };

export class ServedModels implements EngineSource, RetrievalSource {
  constructor(
    private readonly registry: ModelRegistry,
    private readonly memory: LoadedModels<ServedEngine>,
    /** False until the default model's first load has ended: turns are refused (503) until then. */
    private readonly ready: () => boolean,
    /** Where the models' KV states are saved, if anywhere. */
    private readonly kvRoot?: string,
    /** Whether this process's natives take pictures: the npm prebuilt does not, whatever projector a model has. */
    private readonly nativesSee = true,
  ) {}

  async hold(model: string | undefined, signal?: AbortSignal, keepAliveMs?: number): Promise<HeldEngine> {
    return await this.holdFor(model, "chat", (engine) => engine instanceof Engine, signal, keepAliveMs);
  }

  async holdRetrieval(model: string | undefined, purpose: RetrievalPurpose, signal?: AbortSignal, keepAliveMs?: number): Promise<Held<Embedder>> {
    return await this.holdFor(model, purpose, (engine) => engine instanceof Embedder, signal, keepAliveMs);
  }

  loaded(): readonly Engine[] {
    return this.memory.engines().filter((engine) => engine instanceof Engine);
  }

  /** The loaded models forget it (their sequences, their states), then every model's saved state goes. */
  async forget(conversationKey: string): Promise<void> {
    for (const engine of this.loaded()) await engine.forget(conversationKey);
    if (this.kvRoot !== undefined) await forgetSaved(this.kvRoot, conversationKey);
  }

  /** The model `model` names, held, if it is one for `purpose`; else `InvalidInput` naming the model. */
  private async holdFor<M extends ServedEngine>(
    model: string | undefined,
    purpose: ModelPurpose,
    isKind: (engine: ServedEngine) => engine is M,
    signal?: AbortSignal,
    keepAliveMs?: number,
  ): Promise<Held<M>> {
    if (!this.ready()) throw modelLoading();
    const entry = model === undefined && purpose !== "chat" ? this.firstFor(purpose) : this.registry.resolve(model);
    if (entry.description.purpose !== purpose) throw notFor(entry, purpose);
    const held = await this.memory.hold(entry, signal, keepAliveMs);
    if (!isKind(held.engine)) {
      held.release();
      throw notFor(entry, purpose);
    }
    return held as Held<M>;
  }

  /** A request naming no model is for the default, or for the first model of its purpose. */
  private firstFor(purpose: ModelPurpose): ModelEntry {
    const entry = this.registry.first((served) => served.description.purpose === purpose);
    if (!entry) throw new InvalidInput({ part: "model" }, `this service has no ${purpose} model: its operator can add one to the models directory`);
    return entry;
  }

  /** Read afresh: a file added to the models directory is listed (and served) at once. */
  list(): ModelInfo[] {
    this.registry.rescan();
    return this.registry.models.map(({ id, created, description, projector }) => {
      const template = description.metadata["tokenizer.chat_template"];
      const file: ModelFile = {
        ...(description.architecture !== undefined ? { architecture: description.architecture } : {}),
        sizeBytes: description.sizeBytes,
        quantization: description.quantization,
        parameters: description.parameters,
        purpose: description.purpose,
        metadata: description.metadata,
        ...(template?.type === "string" ? { chatTemplate: template.value } : {}),
      };
      const engine = this.loaded().find((loaded) => loaded.modelName === id);
      const expiresAt = this.memory.expiresAt(id);
      return {
        id,
        created,
        loaded: this.memory.isLoaded(id),
        vision: projector !== undefined && this.nativesSee,
        file,
        ...(expiresAt !== undefined ? { expiresAt } : {}),
        ...(engine ? { thinks: engine.thinks, infills: engine.infills } : {}),
      };
    });
  }
}

function notFor(entry: ModelEntry, purpose: ModelPurpose): InvalidInput {
  return new InvalidInput(
    { part: "model" },
    `"${entry.id}" is ${PURPOSES[entry.description.purpose]}, not ${PURPOSES[purpose]}: name ${PURPOSES[purpose]} (GET /v1/models lists them)`,
  );
}
