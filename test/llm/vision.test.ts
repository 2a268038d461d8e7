/**
 * The vision preset (#51's generated pair): a text model and, beside it, a LLaVA-style projector
 * that llama.cpp's mtmd loads. What llama-server answered on it (tools/vision-fixture.ts) is the
 * proof that mtmd takes the pair, and what Parley's replies on images will be held to; these tests
 * keep the generator and that fixture in step, and the files in the shape mtmd requires.
 */
import { describe, expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { getLlama, type LlamaContext, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";
import { integer } from "../../src/gguf/describe";
import { VISION_MODEL_NAME, writePresetModel } from "../../src/gguf/presets";
import { readGgufHeader } from "../../src/gguf/reader";
import { PROJECTOR, projectorFileName } from "../../src/gguf/vision";
import { ggufNames } from "../../src/llm/model";
import { samplingOf } from "../../src/llm/types";
import { decodeSteps, Sampler } from "../../src/natives/addon";
import { evalPrompt, IMAGE_POSITION, loadProjector, unloadProjector } from "../../src/natives/vision";
import { compiledNatives, fileSha256, tempDir } from "../support";
import { VISION_FIXTURE_PATH, VISION_IMAGES, VISION_PROMPT, VISION_REPLY_TOKENS, type VisionFixture } from "../support/vision";

const fixture = (await Bun.file(VISION_FIXTURE_PATH).json()) as VisionFixture;
const natives = await compiledNatives();

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

/** The vision preset loaded on the CPU, one sequence, its projector not yet loaded; freed after `use`. */
async function withVisionContext(
  use: (vision: { model: LlamaModel; context: LlamaContext; sequence: LlamaContextSequence; projector: string }) => Promise<void>,
) {
  const { model: modelPath, projector } = await pair();
  const llama = await getLlama({ gpu: false, build: "never" });
  const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
  const context = await model.createContext({ contextSize: 1024, sequences: 1, threads: 1 });
  try {
    await use({ model, context, sequence: context.getSequence(), projector });
  } finally {
    await unloadProjector(context);
    await context.dispose();
    await model.dispose();
  }
}

describe.skipIf(natives === undefined)("images through the compiled natives (llama.cpp's mtmd)", () => {
  test(
    "a picture and its question evaluate to llama-server's greedy reply, token for token, for each picture",
    () =>
      withVisionContext(async ({ model, context, sequence, projector }) => {
        const sampler = new Sampler(context, model, samplingOf({ temperature: 0 }));
        const addon = (context as unknown as { _ctx: { sampleToken(index: number, sampler: unknown): Promise<Token> } })._ctx;
        try {
          const marker = await loadProjector(context, projector, 1);
          for (const [name, image] of Object.entries(VISION_IMAGES)) {
            await sequence.clearHistory();
            // As llama-server renders the question (its /apply-template): the marker where the image part was.
            const chunks = await evalPrompt(sequence, `<|im_start|>user\n${VISION_PROMPT}${marker}<|im_end|>\n<|im_start|>assistant\n`, [image()], true);
            expect(chunks.map(({ kind }) => kind)).toEqual(["text", "image", "text"]);
            // The projector's square picture in patches, one embedding each.
            const patches = (PROJECTOR.imageSize / PROJECTOR.patchSize) ** 2;
            expect(chunks[1]).toEqual({ kind: "image", tokens: patches, positions: patches });
            expect(sequence.contextTokens.filter((token) => token === IMAGE_POSITION)).toHaveLength(patches);
            expect(sequence.nextTokenIndex).toBe(sequence.contextTokens.length);
            const first = await addon.sampleToken(-1, sampler.native);
            const [rest] = await decodeSteps(context, [{ sequence, token: first, sampler, limit: VISION_REPLY_TOKENS - 1 }], () => VISION_REPLY_TOKENS - 1);
            const reply = [first, ...rest!.tokens].filter((token) => !model.isEogToken(token));
            expect({ name, content: model.detokenize(reply) }).toEqual({ name, content: fixture.replies[name]!.content });
          }
        } finally {
          sampler.dispose();
        }
      }),
    60_000,
  );

  test(
    "an image that is no picture, or markers and images that differ in number, are refused and leave the sequence as it was; a marker is drawn at random",
    () =>
      withVisionContext(async ({ context, sequence, projector }) => {
        await expect(evalPrompt(sequence, "no projector yet", [], true)).rejects.toThrow("no projector");
        const marker = await loadProjector(context, projector, 1);
        expect(marker).toMatch(/^<__parley_image_[0-9a-f]{16}__>$/);
        await expect(evalPrompt(sequence, `look: ${marker}`, [new TextEncoder().encode("not a picture")], true)).rejects.toThrow(
          "image 0 could not be decoded",
        );
        await expect(evalPrompt(sequence, `two: ${marker}${marker}`, [VISION_IMAGES.white!()], true)).rejects.toThrow("2 image markers for 1 images");
        expect(sequence.nextTokenIndex).toBe(0);
        expect(await evalPrompt(sequence, `one: ${marker}`, [VISION_IMAGES.white!()], true)).toHaveLength(2);
        // mtmd's default marker, typed by a user, is text.
        const typed = await evalPrompt(sequence, " <__media__> typed", [], false);
        expect(typed.map(({ kind }) => kind)).toEqual(["text"]);
        expect(sequence.nextTokenIndex).toBe(sequence.contextTokens.length);
      }),
    60_000,
  );
});
