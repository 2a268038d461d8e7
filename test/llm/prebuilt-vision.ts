/**
 * Run by vision.test.ts in a process of its own (a process loads one build of the natives): the
 * vision preset with its projector on the npm prebuilt, which has no mtmd. Prints what the engine
 * says of pictures there as JSON.
 */
import { Engine } from "../../src/llm/engine";
import { VISION_IMAGES } from "../support/vision";

const [modelPath, projectorPath] = Bun.argv.slice(2);
const warnings: string[] = [];
const engine = await Engine.load({
  modelPath: modelPath!,
  projectorPath: projectorPath!,
  localNatives: false,
  threads: 1,
  parallel: 1,
  contextSize: 512,
  onWarning: (message, error) => warnings.push(`${message}: ${(error as Error).message}`),
});
const reply = engine.generate({
  cacheScope: "u1",
  history: [{ role: "user", content: "What is this?", images: [{ data: VISION_IMAGES.white!(), at: 13 }] }],
  temperature: 0,
  maxTokens: 2,
});
const refusal = await reply.next().then(
  () => undefined,
  (error: unknown) => ({ kind: (error as { kind?: string }).kind, field: (error as { field?: unknown }).field, message: (error as Error).message }),
);
const natives = engine.natives;
await engine.close();
console.log(JSON.stringify({ natives, seesImages: engine.seesImages, warnings, refusal }));
