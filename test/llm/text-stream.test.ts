import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { getLlama, type Llama, type LlamaModel, type Token } from "node-llama-cpp";
import { FAMILY_PRESETS } from "../../src/gguf/families";
import type { ModelPreset } from "../../src/gguf/presets";
import { TextStream } from "../../src/llm/text-stream";
import { allowSlowTests, presetModel } from "../support";

allowSlowTests();

// Spaces, punctuation and characters of 2 to 4 bytes (split across byte tokens), long enough that
// the kept context is cut back several times.
const TEXTS = [
  "Hello there, I am happy to help you. What can I do for you today?",
  "Héllo wörld, ça va? 👋🏽 日本語のテキスト 中文 ñandú — and then some more words after it.",
  "Two  spaces,\nnew line\n\n  and indented:\t1 + 2 = 3.  ",
];

/** The pieces node-llama-cpp's own `detokenize` with the last tokens as context gives, token by token. */
function referencePieces(model: LlamaModel, tokens: readonly Token[]): string[] {
  const pieces: string[] = [];
  let pending: Token[] = [];
  let context: Token[] = [];
  const take = () => {
    pieces.push(model.detokenize(pending, false, context));
    context = [...context, ...pending].slice(-8);
    pending = [];
  };
  for (const token of tokens) {
    pending.push(token);
    if (!model.detokenize(pending, false, context).endsWith("\uFFFD") || pending.length >= 4) take();
  }
  if (pending.length > 0) take();
  return pieces.filter((piece) => piece !== "");
}

function streamed(model: LlamaModel, tokens: readonly Token[]): string[] {
  const stream = new TextStream(model);
  return [...tokens.map((token) => stream.push(token)), stream.flush()].filter((piece) => piece !== "");
}

let llama: Llama;
beforeAll(async () => {
  llama = await getLlama({ gpu: false, build: "never" });
});
afterAll(async () => {
  await llama.dispose();
});

for (const preset of ["demo", ...FAMILY_PRESETS] as ModelPreset[]) {
  describe(`TextStream on the ${preset} vocabulary`, () => {
    let model: LlamaModel;
    beforeAll(async () => {
      model = await llama.loadModel({ modelPath: await presetModel(preset) });
    });
    afterAll(async () => {
      await model.dispose();
    });

    test("gives the pieces node-llama-cpp's detokenizing with context gives, none with a broken character", () => {
      for (const text of TEXTS) {
        const tokens = model.tokenize(text);
        expect(tokens.length).toBeGreaterThan(16);
        const pieces = streamed(model, tokens);
        expect(pieces).toEqual(referencePieces(model, tokens));
        for (const piece of pieces) expect(piece).not.toContain("\uFFFD");
        expect(pieces.join("")).toBe(model.detokenize(tokens));
      }
    });
  });
}
