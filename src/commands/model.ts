import { join } from "node:path";
import type { Config } from "../config";
import { DEMO_MODEL_NAME, MODEL_PRESETS, type ModelPreset, writePresetModel } from "../llm/gguf/presets";

const USAGE = `usage: parley model demo [--preset ${MODEL_PRESETS.join("|")}] [--out <file.gguf>]`;

const isPreset = (name: string): name is ModelPreset => (MODEL_PRESETS as readonly string[]).includes(name);

/** `parley model demo`: writes one of the models Parley generates itself; returns the exit code. */
export async function modelCommand(config: Config, args: readonly string[], flags: Map<string, string>): Promise<number> {
  const preset = flags.get("--preset") ?? "demo";
  if (args[0] !== "demo" || !isPreset(preset)) {
    console.error(USAGE);
    return 2;
  }
  const out = flags.get("--out") ?? join(config.modelsDir, preset === "demo" ? `${DEMO_MODEL_NAME}.gguf` : `parley-${preset}.gguf`);
  const started = performance.now();
  await writePresetModel(preset, out);
  const { size } = Bun.file(out);
  console.log(`Wrote the ${preset} model to ${out} (${(size / 1e6).toFixed(1)} MB, ${Math.round(performance.now() - started)} ms)`);
  return 0;
}
