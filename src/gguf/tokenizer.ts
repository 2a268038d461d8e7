// The `tokenizer.*` metadata llama.cpp reads (src/llama-vocab.cpp) for the two tokenizer kinds
// written here: SentencePiece ("llama": scores, byte fallback) and byte-level BPE ("gpt2": merges
// and a pre-tokenizer). Keys come in one fixed order, so a model's bytes never depend on how its
// description was assembled.

import type { BpePre, BpeVocab } from "./bpe";
import { type GgufValue, gguf } from "./values";
import { tokenId, type Vocab } from "./vocab";

/** Which tokens play which part, by their text. llama.cpp also ends generation on some tokens by their text alone. */
export interface SpecialRoles {
  readonly bos: string;
  readonly eos: string;
  /** End of turn, when the family writes it apart from `eos`. */
  readonly eot?: string;
  readonly unk?: string;
  readonly pad?: string;
}

interface Common {
  readonly roles: SpecialRoles;
  readonly addBos: boolean;
  readonly chatTemplate: string;
}

export type TokenizerSpec =
  | (Common & { readonly model: "llama"; readonly vocab: Vocab; readonly addSpacePrefix: boolean })
  | (Common & { readonly model: "gpt2"; readonly pre: BpePre; readonly vocab: BpeVocab });

export function tokenizerMetadata(t: TokenizerSpec): Record<string, GgufValue> {
  const { vocab, roles } = t;
  const id = (text: string) => gguf.u32(tokenId(vocab, text));
  const optional = (key: string, text: string | undefined) => (text === undefined ? {} : { [key]: id(text) });
  return {
    "tokenizer.ggml.model": gguf.string(t.model),
    ...(t.model === "gpt2" ? { "tokenizer.ggml.pre": gguf.string(t.pre) } : {}),
    "tokenizer.ggml.tokens": gguf.array("string", vocab.tokens),
    ...(t.model === "llama" ? { "tokenizer.ggml.scores": gguf.array("f32", t.vocab.scores) } : {}),
    "tokenizer.ggml.token_type": gguf.array("i32", vocab.types),
    ...(t.model === "gpt2" ? { "tokenizer.ggml.merges": gguf.array("string", t.vocab.merges) } : {}),
    ...optional("tokenizer.ggml.unknown_token_id", roles.unk),
    "tokenizer.ggml.bos_token_id": id(roles.bos),
    "tokenizer.ggml.eos_token_id": id(roles.eos),
    ...optional("tokenizer.ggml.eot_token_id", roles.eot),
    ...optional("tokenizer.ggml.padding_token_id", roles.pad),
    "tokenizer.ggml.add_bos_token": gguf.bool(t.addBos),
    "tokenizer.ggml.add_eos_token": gguf.bool(false),
    ...(t.model === "llama" ? { "tokenizer.ggml.add_space_prefix": gguf.bool(t.addSpacePrefix) } : {}),
    "tokenizer.chat_template": gguf.string(t.chatTemplate),
  };
}

/** The demo's and bench-small's tokenizer: SentencePiece and ChatML, a reply ending with <|im_end|>. */
export function chatmlTokenizer(vocab: Vocab, chatTemplate: string): Record<string, GgufValue> {
  return tokenizerMetadata({
    model: "llama",
    vocab,
    // A reply ends with <|im_end|>, so it is both end of sequence and end of turn.
    roles: { unk: "<unk>", bos: "<s>", eos: "<|im_end|>", eot: "<|im_end|>" },
    addBos: true,
    // Without the implicit leading space, text and pieces map one to one: "Hi there" is
    // "Hi" + "▁there" wherever it appears, including right after "assistant\n".
    addSpacePrefix: false,
    chatTemplate,
  });
}
