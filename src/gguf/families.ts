// Generated chat models in the formats of real model families: each is a bigram model
// (bigram.ts) of the demo corpus, with the family's tokenizer kind, special tokens and their
// types, end-of-turn token, `add_bos_token` and the chat template its instruct models ship.
// A family is described here once; `familyGguf` builds any of them.

import { toolSyntaxOf } from "../llm/tool-syntax";
import { bigramGguf, countBigrams, greedyTokens } from "./bigram";
import { type BpePre, buildBpeVocab, byteLevel, preTokenize } from "./bpe";
import { callReplies, joinBreaks, loneBreaks, piecesAround } from "./call-replies";
import { DEMO_CORPUS } from "./corpus";
import { linePieces } from "./demo";
import type { LlamaArchitecture } from "./llama";
import gemmaTemplate from "./templates/gemma-2-it.jinja" with { type: "text" };
import llama3Template from "./templates/llama-3.1-instruct.jinja" with { type: "text" };
import mistralTemplate from "./templates/mistral-7b-instruct-v0.3.jinja" with { type: "text" };
import phi3Template from "./templates/phi-3.5-mini-instruct.jinja" with { type: "text" };
import qwen2Template from "./templates/qwen2.5-instruct.jinja" with { type: "text" };
import qwen3Template from "./templates/qwen3.jinja" with { type: "text" };
import { type SpecialRoles, type TokenizerSpec, tokenizerMetadata } from "./tokenizer";
import { gguf } from "./values";
import { buildVocab, type SpecialToken, TOKEN_TYPE, tokenId } from "./vocab";
import type { GgufFile } from "./writer";

export const FAMILY_PRESETS = ["llama3", "qwen2", "gemma", "mistral", "phi3", "qwen3-thinking", "qwen2-coder"] as const;
export type FamilyPreset = (typeof FAMILY_PRESETS)[number];

export interface Family {
  /** Default "llama": Qwen models are written as the architecture they are (chat format detection looks at it). */
  readonly architecture?: LlamaArchitecture;
  /** How the family's files spell text: SentencePiece (with or without the implicit leading space) or byte-level BPE. */
  readonly tokenizer: { readonly kind: "spm"; readonly addSpacePrefix: boolean } | { readonly kind: "bpe"; readonly pre: BpePre };
  /** In id order, after the vocabulary's byte tokens for BPE, before them for SentencePiece (as the families number them). */
  readonly specials: readonly SpecialToken[];
  readonly roles: SpecialRoles;
  readonly addBos: boolean;
  readonly chatTemplate: string;
  /** The token that ends a reply. */
  readonly endOfTurn: string;
  /** Replies reason first: `<think>\n…\n</think>\n\n` before the answer. */
  readonly thinks?: boolean;
}

const { CONTROL, USER_DEFINED, UNKNOWN } = TOKEN_TYPE;
const control = (...texts: string[]): SpecialToken[] => texts.map((t) => [t, CONTROL]);
const userDefined = (...texts: string[]): SpecialToken[] => texts.map((t) => [t, USER_DEFINED]);

const QWEN2_SPECIALS: readonly SpecialToken[] = [
  ...control("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>"),
  ...control("<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"),
  ...userDefined("<tool_call>", "</tool_call>"),
];
const QWEN_ROLES: SpecialRoles = { bos: "<|endoftext|>", eos: "<|im_end|>", pad: "<|endoftext|>" };

export const FAMILIES: Readonly<Record<FamilyPreset, Family>> = {
  // Llama 3.1/3.2 Instruct: <|eot_id|> ends a turn and is the file's eos; llama.cpp also ends
  // generation on <|eom_id|> and <|end_of_text|> by their text.
  llama3: {
    tokenizer: { kind: "bpe", pre: "llama-bpe" },
    specials: control(
      "<|begin_of_text|>",
      "<|end_of_text|>",
      "<|reserved_special_token_0|>",
      "<|reserved_special_token_1|>",
      "<|finetune_right_pad_id|>",
      "<|reserved_special_token_2|>",
      "<|start_header_id|>",
      "<|end_header_id|>",
      "<|eom_id|>",
      "<|eot_id|>",
      "<|python_tag|>",
    ),
    roles: { bos: "<|begin_of_text|>", eos: "<|eot_id|>", pad: "<|finetune_right_pad_id|>" },
    addBos: true,
    chatTemplate: llama3Template,
    endOfTurn: "<|eot_id|>",
  },
  // Qwen2.5 Instruct: no BOS; <|im_end|> is eos, <|endoftext|> also ends generation.
  qwen2: {
    architecture: "qwen2",
    tokenizer: { kind: "bpe", pre: "qwen2" },
    specials: QWEN2_SPECIALS,
    roles: QWEN_ROLES,
    addBos: false,
    chatTemplate: qwen2Template,
    endOfTurn: "<|im_end|>",
  },
  // Qwen2.5-Coder Instruct: Qwen2.5's tokenizer and template, and the fill-in-the-middle tokens
  // after </tool_call> (ids 151659 to 151664 in the released vocabulary), which llama.cpp's converter
  // writes as user-defined tokens (the released tokenizer does not mark them special) and no
  // `tokenizer.ggml.fim_*` key: llama.cpp finds them by their text and makes them control tokens,
  // <|fim_pad|>, <|repo_name|> and <|file_sep|> ending generation.
  "qwen2-coder": {
    architecture: "qwen2",
    tokenizer: { kind: "bpe", pre: "qwen2" },
    specials: [...QWEN2_SPECIALS, ...userDefined("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")],
    roles: QWEN_ROLES,
    addBos: false,
    chatTemplate: qwen2Template,
    endOfTurn: "<|im_end|>",
  },
  // Qwen3: Qwen2's tokenizer with <think>/</think> as user-defined tokens (shown in text).
  "qwen3-thinking": {
    architecture: "qwen3",
    tokenizer: { kind: "bpe", pre: "qwen2" },
    specials: [...QWEN2_SPECIALS, ...userDefined("<tool_response>", "</tool_response>", "<think>", "</think>")],
    roles: QWEN_ROLES,
    addBos: false,
    chatTemplate: qwen3Template,
    endOfTurn: "<|im_end|>",
    thinks: true,
  },
  // Gemma 2/3 it: <eos> ends a sequence, <end_of_turn> a turn.
  gemma: {
    tokenizer: { kind: "spm", addSpacePrefix: false },
    specials: [["<pad>", CONTROL], ["<eos>", CONTROL], ["<bos>", CONTROL], ["<unk>", UNKNOWN], ...control("<start_of_turn>", "<end_of_turn>")],
    roles: { bos: "<bos>", eos: "<eos>", eot: "<end_of_turn>", unk: "<unk>", pad: "<pad>" },
    addBos: true,
    chatTemplate: gemmaTemplate,
    endOfTurn: "<end_of_turn>",
  },
  // Mistral 7B Instruct v0.3: a reply ends with </s>. The template writes " " between "[/INST]"
  // and a reply; rendered through node-llama-cpp, that space closes the prompt (as "▁" tokens after
  // [/INST]), so a reply begins with its first word bare ("I", not "▁I"), as the history's rendering
  // tokenizes it again: a reply that brought its own "▁" would stand two spaces from [/INST].
  mistral: {
    tokenizer: { kind: "spm", addSpacePrefix: true },
    specials: [
      ["<unk>", UNKNOWN],
      ...control("<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"),
    ],
    roles: { bos: "<s>", eos: "</s>", unk: "<unk>" },
    addBos: true,
    chatTemplate: mistralTemplate,
    endOfTurn: "</s>",
  },
  // Phi-3/3.5 mini instruct: <|end|> ends a turn; its role tokens are user-defined in the
  // released files (llama.cpp makes <|end|> a control token when it loads them).
  phi3: {
    tokenizer: { kind: "spm", addSpacePrefix: false },
    specials: [["<unk>", UNKNOWN], ...control("<s>", "</s>", "<|endoftext|>"), ...userDefined("<|assistant|>", "<|system|>", "<|end|>", "<|user|>")],
    roles: { bos: "<s>", eos: "<|endoftext|>", unk: "<unk>", pad: "<|endoftext|>" },
    addBos: false,
    chatTemplate: phi3Template,
    endOfTurn: "<|end|>",
  },
};

/** What a thinking family's replies reason before answering (no word of them is in the corpus, so sampling never wanders between the two). */
const REASONING: readonly string[] = [
  "Okay someone greets; expecting friendliness.",
  "Hmm seems straightforward; brevity suits.",
  "Alright probably wants encouragement plus practical suggestions.",
  "Okay keeping brevity yet warmth should suffice.",
  "Hmm perhaps acknowledging their message matters.",
  "Alright answering politely seems appropriate.",
];

/** A reply as the family's pieces (vocabulary spelling); special tokens as themselves. */
function replyPiecesOf(family: Family, answer: string, index: number): string[] {
  const { tokenizer } = family;
  const specials = family.specials.map(([text]) => text);
  if (tokenizer.kind === "spm") return piecesAround(answer, specials, linePieces);
  const words = (text: string) => piecesAround(text, specials, (part) => preTokenize(tokenizer.pre, part).map(byteLevel));
  if (!family.thinks) return words(answer);
  // "\n" after <think> is one token with the first word: alone it would be the token that ends
  // the assistant opening, whose context must stay START (the pre-tokenizer never makes this
  // token from text, and reasoning is never re-tokenized: the template drops it from history).
  const [newline, first, ...rest] = words(`\n${REASONING[index % REASONING.length]!}\n`);
  return ["<think>", newline! + first!, ...rest, "</think>", ...words(`\n\n${answer}`)];
}

/**
 * The family's corpus: the demo's replies, then its replies of calls. Where its calls open with a
 * token of their own (or bare, as Llama 3.x's), a reply may begin with one; where the opener is
 * text Parley asks for, the calls are learned from their second token on, so the model closes a
 * call it is held to but never opens one of itself.
 */
function familyCorpus(family: Family) {
  const specials = new Set(family.specials.map(([text]) => text));
  const syntax = toolSyntaxOf(family.chatTemplate);
  const calls = callReplies(syntax);
  const replies = [...DEMO_CORPUS, ...calls].map((answer, i) => {
    const pieces = replyPiecesOf(family, answer, i);
    return i < DEMO_CORPUS.length ? pieces : joinBreaks(pieces, [...specials]);
  });
  const breaks = loneBreaks(replies.slice(DEMO_CORPUS.length), replies.slice(0, DEMO_CORPUS.length));
  const opens = syntax.opener === "" || specials.has(syntax.opener);
  const words = replies.flat().filter((p) => !specials.has(p));
  const tokenizer = family.tokenizer;
  const common = { roles: family.roles, addBos: family.addBos, chatTemplate: family.chatTemplate };
  const spec: TokenizerSpec =
    tokenizer.kind === "spm"
      ? { model: "llama", vocab: buildVocab(words, Infinity, family.specials), addSpacePrefix: tokenizer.addSpacePrefix, ...common }
      : // "\n\n" is a token of every real BPE vocabulary; templates write it after a role.
        { model: "gpt2", pre: tokenizer.pre, vocab: buildBpeVocab([byteLevel("\n\n"), ...words], family.specials), ...common };
  const sequences = replies.map((pieces) => pieces.map((p) => tokenId(spec.vocab, p)));
  const bigrams = countBigrams(sequences, spec.vocab.tokens.length, tokenId(spec.vocab, family.endOfTurn), {
    begins: (i) => opens || i < DEMO_CORPUS.length,
    starting: new Set([...breaks].map((piece) => tokenId(spec.vocab, piece))),
  });
  return { spec, bigrams };
}

export const familyModelName = (preset: FamilyPreset) => `parley-${preset}`;

/** Marks a family model as Parley's own, not the operator's real model of that family. */
export const FAMILY_KEY = "parley.family";

export function familyGguf(preset: FamilyPreset): GgufFile {
  const family = FAMILIES[preset];
  const { spec, bigrams } = familyCorpus(family);
  const file = bigramGguf(familyModelName(preset), bigrams, tokenizerMetadata(spec), family.architecture);
  return { ...file, metadata: { ...file.metadata, [FAMILY_KEY]: gguf.string(preset) } };
}

/** The token texts of the reply greedy decoding produces (no repeat penalty), from the bigram table. */
export function familyGreedyPieces(preset: FamilyPreset, maxTokens = 80): { pieces: string[]; finished: boolean } {
  const { spec, bigrams } = familyCorpus(FAMILIES[preset]);
  const { tokens, finished } = greedyTokens(bigrams, maxTokens);
  return { pieces: tokens.map((t) => spec.vocab.tokens[t]!), finished };
}
