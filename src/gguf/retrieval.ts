// The retrieval models Parley generates, in the GGUF layout of Qwen3's retrieval models as
// llama.cpp's converter writes them: `embed` is a Qwen3-Embedding (last-token pooling over an
// input that ends with <|endoftext|>), `rerank` a Qwen3-Reranker (a "yes"/"no" classifier head,
// RANK pooling, and the prompt the converter writes as `tokenizer.chat_template.rerank`). Both
// have random weights: what they exist for is that Parley and llama-server load the same file and
// give the same vectors and scores, not that the numbers mean anything.

import { RANDOM_WEIGHTS_KEY, randomHalves } from "./bench";
import { buildBpeVocab, byteLevel, preTokenize } from "./bpe";
import { DEMO_CORPUS } from "./corpus";
import { POOLING } from "./describe";
import { tensorTypeFor } from "./file-type";
import { type LlamaHparams, type LlamaTensorSpec, llamaGguf } from "./llama";
import { hash32 } from "./prng";
import { constant, encoded } from "./tensor-data";
import { tokenizerMetadata } from "./tokenizer";
import { type GgufValue, gguf } from "./values";
import { type SpecialToken, TOKEN_TYPE } from "./vocab";
import type { GgufFile } from "./writer";

export const RETRIEVAL_PRESETS = ["embed", "rerank"] as const;
export type RetrievalPreset = (typeof RETRIEVAL_PRESETS)[number];

const HPARAMS: LlamaHparams = { nEmbd: 256, nLayer: 4, nHead: 4, nHeadKv: 2, nFf: 768, contextLength: 8192, rmsEps: 1e-6 };
const SEED = 0x7e7;
const HEAD_SCALE = 64;
const ARCH = "qwen3";

const SPECIALS: readonly SpecialToken[] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map((text) => [text, TOKEN_TYPE.CONTROL]);

/** The reranker's prompt, as llama.cpp's converter writes it for Qwen3-Reranker. */
export const RERANK_TEMPLATE =
  '<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n' +
  "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n" +
  "<|im_start|>assistant\n<think>\n\n</think>\n\n";

export const retrievalModelName = (preset: RetrievalPreset) => `parley-${preset}`;

export function retrievalGguf(preset: RetrievalPreset): GgufFile {
  // The demo corpus's words (and the template's), so that English text is a few tokens a word.
  const text = [...DEMO_CORPUS, RERANK_TEMPLATE.replace(/<\|[a-z_]+\|>/g, " "), "yes no"].join("\n");
  const vocab = buildBpeVocab([byteLevel("\n\n"), ...new Set(preTokenize("qwen2", text).map(byteLevel))], SPECIALS);
  const tokenizer = tokenizerMetadata({
    model: "gpt2",
    pre: "qwen2",
    vocab,
    roles: { bos: "<|endoftext|>", eos: preset === "embed" ? "<|endoftext|>" : "<|im_end|>", pad: "<|endoftext|>" },
    addBos: false,
    chatTemplate: "",
  });
  const { "tokenizer.chat_template": _, ...withoutChat } = tokenizer;
  const weights = (spec: LlamaTensorSpec) => {
    const count = spec.shape.reduce((a, d) => a * d, 1);
    const type = tensorTypeFor("F16", spec);
    if (spec.shape.length === 1) return { type, data: constant(1, count, type) };
    return { type, data: encoded(randomHalves(hash32(`${spec.layer ?? ""}.${spec.kind}`) ^ SEED, count), type) };
  };
  const file = llamaGguf({
    name: retrievalModelName(preset),
    architecture: ARCH,
    hparams: HPARAMS,
    nVocab: vocab.tokens.length,
    tokenizer: withoutChat,
    fileType: "F16",
    weights,
  });
  const metadata: Record<string, GgufValue> = {
    ...file.metadata,
    [RANDOM_WEIGHTS_KEY]: gguf.bool(true),
    [`${ARCH}.pooling_type`]: gguf.u32(preset === "embed" ? POOLING.last : POOLING.rank),
  };
  if (preset === "embed") return { ...file, metadata: { ...metadata, "tokenizer.ggml.add_eos_token": gguf.bool(true) } };
  // "yes" and "no": the rows of the output matrix the converter takes, here noise of their own,
  // scaled so that documents' scores spread over (0, 1) rather than crowd around 0.5.
  const noise = randomHalves(hash32("cls.output") ^ SEED, 2 * HPARAMS.nEmbd);
  const head = encoded(function* () {
    for (const chunk of noise()) yield Float32Array.from(chunk, (x) => x * HEAD_SCALE);
  }, "F16");
  return {
    metadata: {
      ...metadata,
      [`${ARCH}.classifier.output_labels`]: gguf.array("string", ["yes", "no"]),
      "tokenizer.chat_template.rerank": gguf.string(RERANK_TEMPLATE),
    },
    tensors: [...file.tensors, { name: "cls.output.weight", shape: [HPARAMS.nEmbd, 2], type: "F16", data: head }],
  };
}
