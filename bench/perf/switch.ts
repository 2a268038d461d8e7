/**
 * B16: switching models (issue #36). One Parley serving the bench model and a second, smaller one
 * with `PARLEY_MAX_LOADED_MODELS=1`: a request for the other model unloads the bench model, and the
 * next request for the bench model loads it again. That request's time to first token is the
 * switch (the other's unload, the bench model's load and warm-up, its prompt, its first token),
 * against the same request once the model is loaded.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { writePresetModel } from "../../src/gguf/presets";
import { median } from "../../test/support/stats";
import { parleyTurn } from "./clients";
import { type Context, freshDb, parley, type Row, type Scenario, withServer } from "./harness";
import { userMessage } from "./text";

const REPLY_TOKENS = 8;

/** A second model unlike the bench model: the demo, or for the demo itself (--quick) a family preset. */
async function otherModel(ctx: Context): Promise<{ path: string; id: string }> {
  const preset = ctx.quick ? "llama3" : "demo";
  const path = join(ctx.cacheDir, `switch-${preset}.gguf`);
  if (!existsSync(path)) await writePresetModel(preset, path);
  return { path, id: preset === "demo" ? "parley-demo" : `parley-${preset}` };
}

export const modelSwitch: Scenario = {
  ids: ["B16"],
  async run(ctx: Context): Promise<Row[]> {
    const other = await otherModel(ctx);
    const env = { PARLEY_MODEL: `${ctx.model},${other.path}`, PARLEY_MAX_LOADED_MODELS: "1", PARLEY_KEEP_ALIVE_S: "-1" };
    const { switched, warm } = await withServer(parley(ctx, 1, freshDb(ctx), env), async (server) => {
      const switched: number[] = [];
      const warm: number[] = [];
      const ask = (model: string | undefined, tag: string, seed: number) =>
        parleyTurn(server.url, tag, userMessage(40_000 + seed, 16), REPLY_TOKENS, undefined, model ? { model } : {});
      for (let run = 0; run < ctx.runs * 3; run++) {
        await ask(other.id, `other-${run}`, run * 10);
        switched.push((await ask(undefined, `back-${run}`, run * 10 + 1)).ttftMs);
        warm.push((await ask(undefined, `warm-${run}`, run * 10 + 2)).ttftMs);
      }
      return { switched, warm };
    });
    return [
      {
        id: "B16",
        what: "model switch ms: TTFT of the bench model's request after another model's (one loaded at a time)",
        parley: median(switched),
        detail: { switched, warm },
      },
      { id: "B16", what: "TTFT ms of the same request, the model loaded", parley: median(warm), ratio: median(switched) / median(warm) },
    ];
  },
};
