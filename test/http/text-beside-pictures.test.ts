/**
 * On the routes that may carry pictures the body may be as large as the pictures need, but the
 * text beside them stays within the text limit of every other route: a body of text alone is
 * `413` on each protocol, while pictures as large as that body, with a question, pass the check
 * (and meet the model, which here sees no pictures).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Engine } from "../../src/llm/engine";
import { allowSlowTests, postJson, type Served, serveApp, testDb, testEngine } from "../support";
import { png } from "../support/png";

allowSlowTests();

const TEXT_LIMIT = 64 * 1024;
const db = testDb("text-beside-pictures");
const { key } = await db.keys.create("alice", "user");
let engine: Engine;
let served: Served;

beforeAll(async () => {
  engine = await testEngine();
  served = serveApp({ storage: db.storage, engine, limits: { bodyLimitBytes: TEXT_LIMIT, pictureBodyLimitBytes: 8 << 20 } });
});
afterAll(async () => {
  await served.stop();
  await engine.close();
  await db.storage.close();
});

const post = (path: string, body: unknown) => postJson(served.url, key, path, body);

/** A picture of about 1 MiB in base64: noise, so that deflate cannot shrink it. */
const picture = Buffer.from(png(600, 600, (x, y) => [(x * 7919 + y * 104_729) % 251, (x * y) % 253, (x + y * 31) % 241])).toString("base64");
const text = "word ".repeat(200_000);
const url = `data:image/png;base64,${picture}`;

/** Each protocol's request with `words` as its text and, where given, `image` as its picture. */
const requests: [string, (words: string, image?: string) => unknown][] = [
  ["/api/v1.0/chat", (words, image) => ({ conversation_id: "c", message: words, ...(image ? { images: [image] } : {}) })],
  [
    "/v1/chat/completions",
    (words, image) => ({
      messages: [
        {
          role: "user",
          content: [{ type: "text", text: words }, ...(image ? [{ type: "image_url", image_url: { url: `data:image/png;base64,${image}` } }] : [])],
        },
      ],
    }),
  ],
  [
    "/v1/responses",
    (words, image) => ({
      input: [
        {
          role: "user",
          content: [{ type: "input_text", text: words }, ...(image ? [{ type: "input_image", image_url: `data:image/png;base64,${image}` }] : [])],
        },
      ],
    }),
  ],
  [
    "/v1/messages",
    (words, image) => ({
      model: "any",
      max_tokens: 4,
      messages: [
        {
          role: "user",
          content: [{ type: "text", text: words }, ...(image ? [{ type: "image", source: { type: "base64", media_type: "image/png", data: image } }] : [])],
        },
      ],
    }),
  ],
  ["/api/chat", (words, image) => ({ model: "any", stream: false, messages: [{ role: "user", content: words, ...(image ? { images: [image] } : {}) }] })],
  ["/api/generate", (words, image) => ({ model: "any", stream: false, prompt: words, ...(image ? { images: [image] } : {}) })],
];

describe("text beside pictures", () => {
  test.each(requests)("%s: a megabyte of text is 413; a megabyte of picture with a question is not", async (path, body) => {
    expect(url.length).toBeGreaterThan(1 << 20);
    const tooMuch = await post(path, body(text));
    expect(tooMuch.status).toBe(413);
    expect(tooMuch.text).toContain("text beside its pictures");
    const pictured = await post(path, body("what is this?", picture));
    expect(pictured.status).not.toBe(413);
    expect(pictured.text).toContain("sees no pictures");
  });
});
