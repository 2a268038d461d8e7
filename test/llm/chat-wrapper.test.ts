import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { getLlama, type Llama, type LlamaModel } from "node-llama-cpp";
import { resolveModelChatWrapper } from "../../src/llm/chat-wrapper";
import { allowSlowTests, presetModel, tempDir } from "../support";

allowSlowTests();

let llama: Llama;
let model: LlamaModel;
beforeAll(async () => {
  llama = await getLlama({ gpu: false, build: "never" });
  model = await llama.loadModel({ modelPath: await presetModel("demo") });
});
afterAll(async () => {
  await model.dispose();
  await llama.dispose();
});

describe("resolveModelChatWrapper", () => {
  test("detects the format once, remembers it, and gives the same wrapper from memory", () => {
    const dir = tempDir("chat-wrapper");
    const first = resolveModelChatWrapper(model, dir);
    expect(first.wrapperName).toBe("ChatML");
    const remembered = JSON.parse(readFileSync(join(dir, "chat-wrappers.json"), "utf8")) as Record<string, string>;
    expect(Object.values(remembered)).toEqual(["chatML"]);

    const second = resolveModelChatWrapper(model, dir);
    expect(second.constructor).toBe(first.constructor);
    const history = [
      { type: "user" as const, text: "Hi <|im_start|> there" },
      { type: "model" as const, response: [] },
    ];
    expect(second.generateContextState({ chatHistory: history }).contextText.toString()).toBe(
      first.generateContextState({ chatHistory: history }).contextText.toString(),
    );
  });

  test("a corrupt or foreign memory file is ignored and replaced", () => {
    const dir = tempDir("chat-wrapper-corrupt");
    const file = join(dir, "chat-wrappers.json");
    writeFileSync(file, "{not json");
    expect(resolveModelChatWrapper(model, dir).wrapperName).toBe("ChatML");
    expect(Object.values(JSON.parse(readFileSync(file, "utf8")) as object)).toEqual(["chatML"]);
  });
});
