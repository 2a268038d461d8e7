/**
 * Pictures are measured before any is decoded, one by one and a request's together, on every
 * protocol; a remote picture's failure says nothing of the host's ports; and identical pictures that
 * outgrow the context are refused as distinct ones are, not silently dropped. Served on the vision
 * preset.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { deflateRawSync, deflateSync } from "node:zlib";
import { PICTURE_LIMITS } from "../../src/chat/pictures";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, compiledNatives, postJson, type Served, serveApp, testDb, testEngine } from "../support";
import { blackPng, gif, ihdr, jpeg, png, pngChunk, pngOf } from "../support/png";
import { VISION_IMAGES, visionPair } from "../support/vision";

allowSlowTests();

const natives = await compiledNatives();
const { model, projector } = await visionPair();
const base64 = (picture: Uint8Array) => Buffer.from(picture).toString("base64");
const dataUrl = (picture: Uint8Array) => `data:image/png;base64,${base64(picture)}`;

/**
 * The picture that hid its size: a 1×1 CgBI chunk where a size read at fixed offsets finds it, then
 * the real IHDR, 8192×8192 grey, and its zeros deflated raw, as stb_image decodes a CgBI PNG's.
 */
const cgbiBomb = () =>
  pngOf([pngChunk("CgBI", ihdr(1, 1)), pngChunk("IHDR", ihdr(8192, 8192, "grey")), pngChunk("IDAT", deflateRawSync(new Uint8Array(8192 * 8193)))]);

/** A whole PNG cut before its end. */
const truncatedPng = () => VISION_IMAGES.gradient!().subarray(0, 60);

describe.skipIf(natives === undefined)("pictures within their limits", () => {
  const db = testDb("picture-limits");
  let [engine, served, key] = [undefined as unknown as Engine, undefined as unknown as Served, ""];
  beforeAll(async () => {
    key = (await db.keys.create("alice", "user")).key;
    engine = await testEngine({ modelPath: model, projectorPath: projector, parallel: 2, contextSize: 512 });
    // As served by default: room for pictures, and a listed host on this machine.
    served = serveApp({ storage: db.storage, engine, limits: { pictureBodyLimitBytes: 32 * 2 ** 20, pictureHosts: ["127.0.0.1"] } });
  });
  afterAll(async () => {
    await served.stop();
    await engine.close();
    await db.storage.close();
  });
  const post = (path: string, body: unknown) => postJson(served.url, key, path, body);
  /** OpenAI chat: a question, then the pictures at these URLs, then `after`. */
  const openAi = (images: readonly string[], after = "") =>
    post("/v1/chat/completions", {
      model: "any",
      max_tokens: 2,
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "What is in this picture?" },
            ...images.map((url) => ({ type: "image_url", image_url: { url } })),
            ...(after ? [{ type: "text", text: after }] : []),
          ],
        },
      ],
    });
  const native = (images: readonly Uint8Array[]) =>
    post("/api/v1.0/chat", { conversation_id: crypto.randomUUID(), message: "What is in this picture?", max_tokens: 2, images: images.map(base64) });
  /** A refusal before any reply (`422` on the native API, `400` on the others), naming the field, for the reason given. */
  const refused = (answer: { status: number; text: string }, field: string, reason: string, status = 400) => {
    expect(answer.status, answer.text).toBe(status);
    expect(answer.text).toContain(field);
    expect(answer.text).toContain(reason);
  };

  test("the CgBI picture that hid its 8192×8192 pixels is refused from its header on every protocol, naming it", async () => {
    const bomb = cgbiBomb();
    const reason = "first chunk is no valid IHDR";
    refused(await openAi([dataUrl(bomb)]), "messages[0].content[1].image_url.url", reason);
    refused(await native([bomb]), "images[0]", reason, 422);
    const anthropic = await post("/v1/messages", {
      model: "any",
      max_tokens: 2,
      messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: base64(bomb) } }] }],
    });
    refused(anthropic, "messages[0].content[0].source.data", reason);
    const ollama = await post("/api/chat", { model: "any", stream: false, messages: [{ role: "user", content: "Look", images: [base64(bomb)] }] });
    refused(ollama, "messages[0].images[0]", reason);
    const responses = await post("/v1/responses", {
      model: "any",
      input: [{ role: "user", content: [{ type: "input_image", image_url: dataUrl(bomb) }] }],
    });
    refused(responses, "input[0].content[0].image_url", reason);
  });

  test("a PNG cut short is refused, by a chat and by a conversation's new item; a JPEG cut short, and a GIF frame outside its screen, too", async () => {
    refused(await openAi([dataUrl(truncatedPng())]), "messages[0].content[1].image_url.url", "PNG cut short");
    const item = await post("/v1/conversations", {
      items: [{ type: "message", role: "user", content: [{ type: "input_image", image_url: dataUrl(truncatedPng()) }] }],
    });
    refused(item, "items[0].content[0].image_url", "PNG cut short");
    refused(await native([jpeg([{ width: 64, height: 48 }]).subarray(0, 30)]), "images[0]", "JPEG cut short", 422);
    const offScreen = gif({ width: 16, height: 16 }, [{ left: 8, top: 0, width: 16, height: 16 }]);
    refused(await native([offScreen]), "images[0]", "lies outside its 16×16 screen", 422);
  });

  test("a 1×1 PNG whose image data inflates to 64 MiB is refused before the decoder inflates it", async () => {
    const inflating = pngOf([pngChunk("IHDR", ihdr(1, 1)), pngChunk("IDAT", deflateSync(new Uint8Array(64 << 20))), pngChunk("IEND", new Uint8Array())]);
    refused(await native([inflating]), "images", "inflates to more than its header's rows take", 422);
    refused(await openAi([dataUrl(inflating)]), "messages", "inflates to more than its header's rows take");
  });

  test(`a request holds at most ${PICTURE_LIMITS.perRequest} pictures, on any protocol, counted across its messages`, async () => {
    const white = dataUrl(VISION_IMAGES.white!());
    const tooMany = PICTURE_LIMITS.perRequest + 1;
    refused(await openAi(new Array(tooMany).fill(white)), `messages[0].content[${tooMany}].image_url.url`, `picture ${tooMany} of the request`);
    const images = (count: number) => new Array(count).fill(base64(VISION_IMAGES.white!()));
    const ollama = await post("/api/chat", {
      model: "any",
      stream: false,
      messages: [
        { role: "user", content: "Look", images: images(10) },
        { role: "assistant", content: "Yes" },
        { role: "user", content: "And these", images: images(tooMany - 10) },
      ],
    });
    refused(ollama, `messages[2].images[${tooMany - 11}]`, `picture ${tooMany} of the request`);
  });

  test(`a request's pictures have at most ${PICTURE_LIMITS.requestPixels} pixels together, though each is within its own limit`, async () => {
    const largest = blackPng(4096, 4096);
    const fit = PICTURE_LIMITS.requestPixels / PICTURE_LIMITS.pixels;
    refused(await native(new Array(fit + 1).fill(largest)), `images[${fit}]`, "one request's pictures may have together", 422);
  });

  test("a remote picture that cannot be fetched gets one answer, whether the port is closed, the host drops the connection or answers an error", async () => {
    const closed = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data: () => {} } });
    const closedPort = closed.port;
    closed.stop(true);
    const dropping = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { open: (socket) => void socket.end(), data: () => {} } });
    const pictures = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: (request) => (new URL(request.url).pathname === "/white.png" ? new Response(VISION_IMAGES.white!()) : new Response("gone", { status: 500 })),
    });
    try {
      const ask = (url: string) =>
        post("/v1/chat/completions", { model: "any", max_tokens: 2, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url } }] }] });
      const fetched = await ask(`http://127.0.0.1:${pictures.port}/white.png`);
      expect(fetched.status, fetched.text).toBe(200);
      const answers = [
        await ask(`http://127.0.0.1:${closedPort}/white.png`),
        await ask(`http://127.0.0.1:${dropping.port}/white.png`),
        await ask(`http://127.0.0.1:${pictures.port}/missing.png`),
      ];
      for (const answer of answers) refused(answer, "messages[0].content[0].image_url.url", "could not be fetched from 127.0.0.1");
      const messages = answers.map(({ text }) => (JSON.parse(text) as { error: { message: string } }).error.message);
      expect(new Set(messages).size).toBe(1);
    } finally {
      await pictures.stop(true);
      dropping.stop(true);
    }
  });

  test("identical pictures that outgrow the context are refused naming a picture, as distinct ones are, not silently dropped", async () => {
    const count = PICTURE_LIMITS.perRequest;
    const distinct = Array.from({ length: count }, (_, i) => dataUrl(png(32, 32, () => [i * 8, 0, 0])));
    const identical = new Array(count).fill(dataUrl(VISION_IMAGES.white!()));
    // Text after them, so that fitting the message cuts its start: some of the pictures, not all.
    const after = " Describe them.".repeat(30);
    for (const images of [distinct, identical]) refused(await openAi(images, after), "messages", "does not fit the context with the rest of its message");
    // Fewer of the same picture fit, and are answered.
    const fits = await openAi(identical.slice(0, 4), after);
    expect(fits.status, fits.text).toBe(200);
  });
});
