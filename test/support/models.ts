/** The app serving several models, as `parley serve` composes it: a registry, the models in memory, a runner over both. */
import { CompletionService } from "../../src/chat/completions";
import { ServedModels } from "../../src/chat/served-models";
import { ChatService } from "../../src/chat/service";
import { TurnRunner } from "../../src/chat/turn-runner";
import type { Storage } from "../../src/db/storage";
import { LoadedModels } from "../../src/llm/loaded-models";
import { ModelRegistry } from "../../src/llm/model";
import { type Served, serveApp, testEngine } from "./app";
import { tempDir } from "./files";

export interface ServedModelsApp {
  served: Served;
  memory: LoadedModels;
  /** Model ids in the order they were loaded. */
  loads: string[];
  /** The most models loaded at once so far. */
  mostAtOnce(): number;
  stop(): Promise<void>;
}

export async function serveModels(options: {
  storage: Storage;
  paths: string[];
  max: number;
  keepAliveMs: number;
  aliases?: Record<string, string>;
}): Promise<ServedModelsApp> {
  const registry = await ModelRegistry.open({
    paths: options.paths,
    modelsDir: tempDir("no-models"),
    ...(options.aliases ? { aliases: options.aliases } : {}),
  });
  let loadedAtOnce = 0;
  let mostAtOnce = 0;
  const loads: string[] = [];
  const memory = new LoadedModels({
    max: options.max,
    keepAliveMs: options.keepAliveMs,
    queueMax: 8,
    load: (entry) => testEngine({ modelPath: entry.path, parallel: 2, contextSize: 1024 }),
    onLoaded: (entry) => {
      loads.push(entry.id);
      mostAtOnce = Math.max(mostAtOnce, ++loadedAtOnce);
    },
    onUnloaded: () => loadedAtOnce--,
  });
  const runner = new TurnRunner(new ServedModels(registry, memory, () => true));
  const served = serveApp({
    storage: options.storage,
    runner,
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
