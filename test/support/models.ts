/** The app serving several models, as `parley serve` composes it: a registry, the models in memory, a runner over both. */
import { CompletionService } from "../../src/chat/completions";
import { RetrievalService } from "../../src/chat/retrieval";
import { type ServedEngine, ServedModels } from "../../src/chat/served-models";
import { ChatService } from "../../src/chat/service";
import type { TokenLedger } from "../../src/chat/token-ledger";
import { TurnRunner } from "../../src/chat/turn-runner";
import type { Storage } from "../../src/db/storage";
import { Embedder } from "../../src/llm/embedder";
import { LoadedModels } from "../../src/llm/loaded-models";
import { ModelRegistry } from "../../src/llm/model";
import { type Served, type ServeOptions, serveApp, testEngine } from "./app";
import { tempDir } from "./files";

export interface ServedModelsApp {
  served: Served;
  memory: LoadedModels<ServedEngine>;
  /** Model ids in the order they were loaded. */
  loads: string[];
  /** The most models loaded at once so far. */
  mostAtOnce(): number;
  stop(): Promise<void>;
}

export async function serveModels(
  options: {
    storage: Storage;
    paths: string[];
    max: number;
    keepAliveMs: number;
    aliases?: Record<string, string>;
    /** Users' tokens and budgets, which the retrieval routes count to (the turns' runner counts to none here). */
    ledger?: TokenLedger;
    /** Tokens per sequence of every model. Default 1024. */
    contextSize?: number;
  } & Pick<ServeOptions, "logLines" | "limits">,
): Promise<ServedModelsApp> {
  const contextSize = options.contextSize ?? 1024;
  const registry = await ModelRegistry.open({
    paths: options.paths,
    modelsDir: tempDir("no-models"),
    ...(options.aliases ? { aliases: options.aliases } : {}),
  });
  let loadedAtOnce = 0;
  let mostAtOnce = 0;
  const loads: string[] = [];
  const memory = new LoadedModels<ServedEngine>({
    max: options.max,
    keepAliveMs: options.keepAliveMs,
    queueMax: 8,
    load: (entry): Promise<ServedEngine> =>
      entry.description.purpose === "chat"
        ? testEngine({ modelPath: entry.path, parallel: 2, contextSize, ...(entry.projector ? { projectorPath: entry.projector } : {}) })
        : Embedder.load({ modelPath: entry.path, parallel: 4, contextSize, threads: 1 }),
    onLoaded: (entry) => {
      loads.push(entry.id);
      mostAtOnce = Math.max(mostAtOnce, ++loadedAtOnce);
    },
    onUnloaded: () => loadedAtOnce--,
  });
  const models = new ServedModels(registry, memory, () => true);
  const runner = new TurnRunner(models);
  const served = serveApp({
    storage: options.storage,
    runner,
    retrieval: new RetrievalService(models, options.ledger),
    ...(options.logLines ? { logLines: options.logLines } : {}),
    ...(options.limits ? { limits: options.limits } : {}),
    chat: new ChatService(options.storage.conversations, runner),
    completions: new CompletionService(runner),
  });
  return {
    memory,
    served,
    loads,
    mostAtOnce: () => mostAtOnce,
    async stop() {
      await served.stop();
      await memory.close();
    },
  };
}
