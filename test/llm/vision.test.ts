/**
 * The vision preset (#51's generated pair): a text model and, beside it, a LLaVA-style projector
 * that llama.cpp's mtmd loads. What llama-server answered on it (tools/vision-fixture.ts) is the
 * proof that mtmd takes the pair, and what Parley's replies on images will be held to; these tests
 * keep the generator and that fixture in step, and the files in the shape mtmd requires.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { getLlama, type LlamaContext, type LlamaContextSequence, type LlamaModel, type Token } from "node-llama-cpp";
import { integer } from "../../src/gguf/describe";
import { VISION_MODEL_NAME } from "../../src/gguf/presets";
import { readGgufHeader } from "../../src/gguf/reader";
import { PROJECTOR, projectorFileName } from "../../src/gguf/vision";
import { ggufNames } from "../../src/llm/model";
import type { Turn } from "../../src/llm/types";
import { evalImage, imageLayout, loadProjector, unloadProjector } from "../../src/natives/vision";
import { allowSlowTests, compiledNatives, fileSha256, generated, testEngine } from "../support";
import { VISION_FIXTURE_PATH, VISION_IMAGES, VISION_PROMPT, VISION_REPLY_TOKENS, type VisionFixture, visionPair } from "../support/vision";

allowSlowTests();

const fixture = (await Bun.file(VISION_FIXTURE_PATH).json()) as VisionFixture;
const natives = await compiledNatives();

const pair = visionPair;

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

/** The vision preset loaded on the CPU, one sequence, its projector loaded; freed after `use`. */
async function withVisionContext(use: (vision: { model: LlamaModel; context: LlamaContext; sequence: LlamaContextSequence }) => Promise<void>) {
  const { model: modelPath, projector } = await pair();
  const llama = await getLlama({ gpu: false, build: "never" });
  const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
  const context = await model.createContext({ contextSize: 1024, sequences: 1, threads: 1 });
  try {
    await loadProjector(context, projector, 1);
    await use({ model, context, sequence: context.getSequence() });
  } finally {
    await unloadProjector(context);
    await context.dispose();
    await model.dispose();
  }
}

/** The projector's square picture in patches, one embedding and one position each. */
const PATCHES = (PROJECTOR.imageSize / PROJECTOR.patchSize) ** 2;

describe.skipIf(natives === undefined)("images through the compiled natives (llama.cpp's mtmd)", () => {
  test(
    "a picture stands in a prompt as its patches; prepared by its layout, it evaluates at the sequence's next positions, recorded as its placeholder",
    () =>
      withVisionContext(async ({ model, sequence, context }) => {
        for (const [name, image] of Object.entries(VISION_IMAGES))
          expect(await imageLayout(context, image(), name)).toEqual([{ kind: "image", tokens: PATCHES, positions: PATCHES }]);
        await sequence.evaluateWithoutGeneratingNewTokens(model.tokenize("<|im_start|>user\n", true));
        const before = sequence.nextTokenIndex;
        const placeholder = -7 as Token;
        // Prepared by its layout under this key: what the natives evaluate, whatever bytes come with it.
        await evalImage(sequence, { image: new Uint8Array(0), key: "white", chunk: 0, positions: PATCHES }, placeholder);
        expect(sequence.nextTokenIndex).toBe(before + PATCHES);
        expect(sequence.contextTokens.slice(before)).toEqual(new Array<Token>(PATCHES).fill(placeholder));
        // Text goes on after it as after any token.
        await sequence.evaluateWithoutGeneratingNewTokens(model.tokenize("<|im_end|>", true));
        expect(sequence.nextTokenIndex).toBe(sequence.contextTokens.length);
      }),
    60_000,
  );

  test(
    "what is no picture, or no image chunk of one, is refused and leaves the sequence as it was",
    () =>
      withVisionContext(async ({ sequence, context }) => {
        const notPicture = new TextEncoder().encode("not a picture");
        await expect(imageLayout(context, notPicture, "a")).rejects.toThrow("the image could not be decoded");
        // Under a key nothing was prepared by, the bytes are decoded.
        await expect(evalImage(sequence, { image: notPicture, key: "b", chunk: 0, positions: PATCHES }, -1 as Token)).rejects.toThrow("could not be decoded");
        const white = { image: VISION_IMAGES.white!(), key: "c", chunk: 0, positions: PATCHES };
        await expect(evalImage(sequence, { ...white, chunk: 1 }, -1 as Token)).rejects.toThrow("no image chunk 1");
        await expect(evalImage(sequence, { ...white, positions: PATCHES + 1 }, -1 as Token)).rejects.toThrow(`took ${PATCHES} positions`);
        expect(sequence.nextTokenIndex).toBe(0);
        expect(sequence.contextTokens).toEqual([]);
      }),
    60_000,
  );
});

/** A user's turn: the question, then the picture after its text (as the fixture asked llama-server). */
const askAbout = (image: Uint8Array, question = VISION_PROMPT): Turn => ({ role: "user", content: question, images: [{ data: image, at: question.length }] });

describe.skipIf(natives === undefined)("the engine with a projector", () => {
  const engine = (async () => {
    const { model, projector } = await pair();
    return await testEngine({ modelPath: model, projectorPath: projector, parallel: 2, contextSize: 1024 });
  })();
  afterAll(async () => await (await engine).close());

  test("a picture and its question give llama-server's greedy reply, token for token, for each picture", async () => {
    const vision = await engine;
    expect(vision.seesImages).toBe(true);
    for (const [name, image] of Object.entries(VISION_IMAGES)) {
      const result = await generated(vision, { cacheScope: "u1", history: [askAbout(image())], temperature: 0, maxTokens: VISION_REPLY_TOKENS });
      expect({ name, content: result.text }).toEqual({ name, content: fixture.replies[name]!.content });
      expect(result.completionTokens).toBe(fixture.replies[name]!.tokens.length);
    }
  }, 60_000);

  test("a conversation's next turn reuses its picture's cells; another user's same picture reuses none of them", async () => {
    const vision = await engine;
    const picture = VISION_IMAGES.gradient!();
    const first = await generated(vision, {
      cacheScope: "u1",
      conversationKey: "c1",
      startsConversation: true,
      history: [askAbout(picture)],
      temperature: 0,
      maxTokens: 8,
    });
    const history: Turn[] = [askAbout(picture), { role: "assistant", content: first.text }, { role: "user", content: "And the colours?" }];
    const second = await generated(vision, { cacheScope: "u1", conversationKey: "c1", history, temperature: 0, maxTokens: 8 });
    expect(second.cachedTokens).toBeGreaterThan(first.promptTokens - 8);
    // Stateless, another user: at most the template's opening, before any picture.
    const other = await generated(vision, { cacheScope: "u2", history: [askAbout(picture)], temperature: 0, maxTokens: 8 });
    expect(other.cachedTokens).toBeLessThan(first.promptTokens - PATCHES);
    expect(other.text).toBe(first.text);
  }, 60_000);

  test("one sequence of a context smaller than the batch asked for sees a picture too (its batch is the context's)", async () => {
    const { model, projector } = await pair();
    const small = await testEngine({ modelPath: model, projectorPath: projector, parallel: 1, contextSize: 512 });
    try {
      const result = await generated(small, { cacheScope: "u1", history: [askAbout(VISION_IMAGES.white!())], temperature: 0, maxTokens: VISION_REPLY_TOKENS });
      expect(result.text).toBe(fixture.replies.white!.content);
    } finally {
      await small.close();
    }
  }, 60_000);

  test("what is no picture, and a picture that cannot fit the context, are refused naming the picture", async () => {
    const vision = await engine;
    const notPicture: Turn = { role: "user", content: "look", images: [{ data: new TextEncoder().encode("no"), at: 4 }] };
    const refused = generated(vision, {
      cacheScope: "u1",
      history: [{ role: "user", content: "hi" }, { role: "assistant", content: "yes" }, notPicture],
      temperature: 0,
      maxTokens: 4,
    });
    await expect(refused).rejects.toMatchObject({ field: { part: "image", index: 0 } });
    // Fitting keeps a message's end: a picture before its long text is cut off.
    const long: Turn = { role: "user", content: "word ".repeat(2000), images: [{ data: VISION_IMAGES.white!(), at: 0 }] };
    await expect(generated(vision, { cacheScope: "u1", history: [long], temperature: 0, maxTokens: 4 })).rejects.toMatchObject({
      field: { part: "image", index: 0 },
    });
  }, 60_000);

  test("on the npm prebuilt the model loads without its projector, with a warning, and a picture is refused saying how to get the natives", async () => {
    const { model, projector } = await pair();
    const child = Bun.spawnSync(["bun", "test/llm/prebuilt-vision.ts", model, projector], {
      cwd: join(import.meta.dir, "..", ".."),
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(child.exitCode, child.stderr.toString()).toBe(0);
    const seen = JSON.parse(child.stdout.toString().trim().split("\n").at(-1)!) as {
      natives: string;
      seesImages: boolean;
      warnings: string[];
      refusal?: { kind: string; field: unknown; message: string };
    };
    expect(seen).toMatchObject({ natives: "prebuilt", seesImages: false, refusal: { kind: "invalid_input", field: { part: "image", index: 0 } } });
    expect(seen.refusal!.message).toContain("bun run natives");
    expect(seen.warnings.join("\n")).toContain("is not loaded");
  }, 120_000);

  test("a model without a projector refuses pictures, saying how to give it one", async () => {
    const blind = await testEngine({ preset: "demo", parallel: 1, contextSize: 512 });
    try {
      expect(blind.seesImages).toBe(false);
      await expect(generated(blind, { cacheScope: "u1", history: [askAbout(VISION_IMAGES.white!())], temperature: 0, maxTokens: 4 })).rejects.toThrow(
        "mmproj-",
      );
    } finally {
      await blind.close();
    }
  }, 60_000);
});
