/**
 * The vision preset (#51's generated pair): a text model and, beside it, a LLaVA-style projector
 * that llama.cpp's mtmd loads. What llama-server answered on it (tools/vision-fixture.ts) is the
 * proof that mtmd takes the pair, and what Parley's replies on images will be held to; these tests
 * keep the generator and that fixture in step, and the files in the shape mtmd requires.
 */
import { describe, expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { integer } from "../../src/gguf/describe";
import { VISION_MODEL_NAME, writePresetModel } from "../../src/gguf/presets";
import { readGgufHeader } from "../../src/gguf/reader";
import { PROJECTOR, projectorFileName } from "../../src/gguf/vision";
import { ggufNames } from "../../src/llm/model";
import { fileSha256, tempDir } from "../support";
import { VISION_FIXTURE_PATH, VISION_IMAGES, type VisionFixture } from "../support/vision";

const fixture = (await Bun.file(VISION_FIXTURE_PATH).json()) as VisionFixture;

async function pair() {
  const dir = tempDir("vision");
  const model = join(dir, `${VISION_MODEL_NAME}.gguf`);
  await writePresetModel("vision", model);
  return { dir, model, projector: join(dir, projectorFileName(`${VISION_MODEL_NAME}.gguf`)) };
}

describe("the vision preset", () => {
  test("writes the model and its projector beside it, byte for byte the pair llama-server answered on", async () => {
    const { dir, model, projector } = await pair();
    expect(readdirSync(dir).sort()).toEqual([projectorFileName(`${VISION_MODEL_NAME}.gguf`), `${VISION_MODEL_NAME}.gguf`]);
    // Changed bytes need `bun run tools/vision-fixture.ts` again: the fixture must be of these files.
    expect({ model: await fileSha256(model), projector: await fileSha256(projector) }).toEqual({ model: fixture.model, projector: fixture.projector });
    // A projector in the models directory is no model of its own.
    expect(ggufNames(dir)).toEqual([`${VISION_MODEL_NAME}.gguf`]);
  });

  test("the projector is what mtmd's LLaVA ('mlp') loader requires, projected into the model's width", async () => {
    const { model, projector } = await pair();
    const text = readGgufHeader(model);
    const { metadata, tensors } = readGgufHeader(projector);
    const value = (key: string) => (metadata[key] as { type: string; value?: unknown } | undefined) ?? { type: "missing" };
    expect(value("clip.projector_type")).toEqual({ type: "string", value: "mlp" });
    expect(value("clip.has_vision_encoder")).toEqual({ type: "bool", value: true });
    // mtmd reads these as u32 and the epsilon as f32: another type aborts the process.
    for (const key of ["image_size", "patch_size", "embedding_length", "feed_forward_length", "projection_dim", "block_count", "attention.head_count"]) {
      expect(value(`clip.vision.${key}`).type).toBe("u32");
    }
    expect(value("clip.vision.attention.layer_norm_epsilon").type).toBe("f32");
    // Tiling (llava-uhd) would start with grid pinpoints; mm.3 would make it another projector type.
    expect(metadata["clip.vision.image_grid_pinpoints"]).toBeUndefined();
    const shape = new Map(tensors.map((t) => [t.name, t.shape]));
    expect(shape.has("mm.3.weight")).toBe(false);
    const width = integer(text.metadata["llama.embedding_length"]);
    expect(shape.get("mm.2.weight")).toEqual([PROJECTOR.hidden, width!]);
    expect(shape.get("v.position_embd.weight")).toEqual([PROJECTOR.width, (PROJECTOR.imageSize / PROJECTOR.patchSize) ** 2]);
    for (let i = 0; i < PROJECTOR.blocks; i++) {
      for (const kind of ["attn_q", "attn_k", "attn_v", "attn_out", "ffn_up", "ffn_down"]) expect(shape.has(`v.blk.${i}.${kind}.weight`)).toBe(true);
    }
    // ggml's CPU add and mul take no F16 bias or norm.
    expect(tensors.filter((t) => t.shape.length === 1 && t.typeId !== 0).map((t) => t.name)).toEqual([]);
  });

  test("llama-server's replies depend on the picture, so an answer that ignored it could not match them", () => {
    expect(Object.keys(fixture.replies).sort()).toEqual(Object.keys(VISION_IMAGES).sort());
    const contents = Object.values(fixture.replies).map((reply) => reply.content);
    expect(new Set(contents).size).toBe(contents.length);
  });
});
