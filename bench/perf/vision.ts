/**
 * B23 time to first token of a question with a new picture and B24 what the picture adds to it
 * (issue #51): Parley serving the vision preset with its projector beside it, against llama-server
 * on the same pair (`--mmproj`), one sequence each, the same threads, their rounds alternating,
 * each asked the same chat-completions request (the native API would add storing the picture).
 * Each round asks each server the question alone, then with a picture neither has seen (256×256,
 * colours drawn per round, so no cache holds it): the picture's cost is the difference, its
 * decoding, resizing, encoding by the projector and evaluation.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { VISION_MODEL_NAME, writePresetModel } from "../../src/gguf/presets";
import { projectorFileName } from "../../src/gguf/vision";
import { png } from "../../test/support/png";
import { median } from "../../test/support/stats";
import { VISION_PROMPT } from "../../test/support/vision";
import { llamaServerTurn, type Message, parleyCompletionTurn } from "./clients";
import { alternate, type Context, freshDb, parley, type Row, ratio, type Scenario } from "./harness";
import { startLlamaServer } from "./procs";

const SIDE = 256;

/** The vision preset and its projector in the cache directory. */
async function visionPair(ctx: Context): Promise<{ model: string; projector: string }> {
  const model = join(ctx.cacheDir, `${VISION_MODEL_NAME}.gguf`);
  const projector = join(ctx.cacheDir, projectorFileName(`${VISION_MODEL_NAME}.gguf`));
  if (!existsSync(model) || !existsSync(projector)) await writePresetModel("vision", model);
  return { model, projector };
}

/** Round `run`'s picture, in base64: colours of its own, so no server has seen it. */
const picture = (run: number) =>
  Buffer.from(png(SIDE, SIDE, (x, y) => [(x + run * 37) % 256, (y * 3 + run * 11) % 256, (x ^ y ^ run) % 256])).toString("base64");

interface Round {
  /** TTFT ms of the question alone, and of the question with a new picture. */
  text: number;
  picture: number;
}

export const vision: Scenario = {
  ids: ["B23", "B24"],
  async run(ctx: Context): Promise<Row[]> {
    const { model, projector } = await visionPair(ctx);
    // The same chat-completions request to both, stateless.
    const ask = async (name: string, url: string, image: string | undefined): Promise<number> => {
      const content = image
        ? [
            { type: "text", text: VISION_PROMPT },
            { type: "image_url", image_url: { url: `data:image/png;base64,${image}` } },
          ]
        : VISION_PROMPT;
      const messages = [{ role: "user", content }];
      return (name === "parley" ? await parleyCompletionTurn(url, messages, 2) : await llamaServerTurn(url, messages as Message[], 2)).ttftMs;
    };
    const contenders = [
      { name: "parley", start: parley(ctx, 1, freshDb(ctx), { PARLEY_MODEL: model, PARLEY_CONTEXT_SIZE: "1024" }) },
      ...(ctx.llamaServer
        ? [
            {
              name: "llamaServer",
              start: () =>
                startLlamaServer({
                  binary: ctx.llamaServer!,
                  model,
                  threads: ctx.threads,
                  parallel: 1,
                  contextSize: 1024,
                  flags: ["--mmproj", projector, ...(ctx.llamaFlags ?? [])],
                }),
            },
          ]
        : []),
    ] as const;
    const { runs } = await alternate(
      contenders,
      (contender) => contender.start,
      (contender, server) => ask(contender.name, server.url, picture(-1)),
      async (contender, url, run): Promise<Round> => ({
        text: await ask(contender.name, url, undefined),
        picture: await ask(contender.name, url, picture(run)),
      }),
      ctx.runs * 5,
    );
    const ttft = (rounds: Round[] | undefined) => rounds && median(rounds.map((round) => round.picture));
    const cost = (rounds: Round[] | undefined) => rounds && median(rounds.map((round) => round.picture - round.text));
    const [mine, theirs] = [runs.parley as Round[] | undefined, runs.llamaServer as Round[] | undefined];
    return [
      {
        id: "B23",
        what: `TTFT ms, a chat completion with a new ${SIDE}×${SIDE} picture`,
        parley: ttft(mine),
        yardstick: ttft(theirs),
        ratio: ratio(ttft(mine), ttft(theirs)),
        target: ["<=", 1.0],
        detail: { parley: mine, llamaServer: theirs },
      },
      {
        id: "B24",
        what: "a picture's ms: TTFT with it − without (decode, encode, evaluate)",
        parley: cost(mine),
        yardstick: cost(theirs),
        ratio: ratio(cost(mine), cost(theirs)),
        target: ["<=", 1.0],
      },
    ];
  },
};
