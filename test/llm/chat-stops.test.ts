import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ChatMLChatWrapper, GeneralChatWrapper, getLlama, type Llama, type LlamaModel } from "node-llama-cpp";
import { chatStops } from "../../src/llm/chat-stops";
import { allowSlowTests, presetModel } from "../support";

allowSlowTests();

let llama: Llama;
let model: LlamaModel;
beforeAll(async () => {
  llama = await getLlama({ gpu: false, build: "never" });
  model = await llama.loadModel({ modelPath: await presetModel("demo"), vocabOnly: true });
});
afterAll(async () => {
  await llama.dispose();
});

describe("a chat format's stops", () => {
  test("ChatML: <|im_end|> is a stop token, and its text a stop string should plain tokens spell it", () => {
    const stops = chatStops(model, new ChatMLChatWrapper());
    expect([...stops.tokens].map((token) => model.detokenize([token], true))).toContain("<|im_end|>");
    expect(stops.texts).toContain("<|im_end|>");
  });

  test("the general format (no usable template) ends a reply where the next turn's heading begins", () => {
    const stops = chatStops(model, new GeneralChatWrapper());
    expect(stops.texts).toEqual(expect.arrayContaining(["### Human", "\n\n### Human", "### Assistant"]));
    expect(stops.texts.every((text) => text !== "")).toBe(true);
  });
});
