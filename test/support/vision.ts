/**
 * What llama-server answered for the vision preset (tools/vision-fixture.ts writes it), and the
 * pictures and prompt it was asked: generated here, so no image file is committed.
 */
import { dirname, join } from "node:path";
import { VISION_MODEL_NAME, writePresetModel } from "../../src/gguf/presets";
import { projectorFileName } from "../../src/gguf/vision";
import { tempDir } from "./files";
import { png } from "./png";

export const VISION_FIXTURE_PATH = join(import.meta.dir, "..", "fixtures", "llama-server-vision.json");

export const VISION_PROMPT = "What is in this picture?";
export const VISION_REPLY_TOKENS = 16;

/** Three pictures unlike each other, of other sizes than the projector's 32×32 (resized and padded), one its size. */
export const VISION_IMAGES: Readonly<Record<string, () => Uint8Array>> = {
  gradient: () => png(48, 40, (x, y) => [x * 5, y * 6, (x * y) % 256]),
  white: () => png(32, 32, () => [255, 255, 255]),
  stripes: () => png(20, 64, (_, y) => (y % 8 < 4 ? [200, 30, 30] : [20, 20, 180])),
};

export interface VisionFixture {
  /** sha256 of the model and of its projector, as the preset writes them. */
  model: string;
  projector: string;
  /** Per picture: llama-server's greedy reply and its tokens' log-probabilities. */
  replies: Record<string, { content: string; tokens: { token: string; logprob: number }[] }>;
}

/** The vision preset written to a fresh directory: the model, and its projector beside it. */
export async function visionPair(): Promise<{ dir: string; model: string; projector: string }> {
  const dir = tempDir("vision");
  const model = join(dir, `${VISION_MODEL_NAME}.gguf`);
  await writePresetModel("vision", model);
  return { dir, model, projector: join(dirname(model), projectorFileName(`${VISION_MODEL_NAME}.gguf`)) };
}
