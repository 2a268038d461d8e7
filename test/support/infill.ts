/**
 * What llama-server's `/infill` answered on the qwen2-coder preset (tools/infill-fixture.ts writes
 * it), the requests it was asked, and the shape both servers were given: one slot of `CONTEXT`
 * tokens, prompts evaluated `BATCH` at a time.
 */
import { join } from "node:path";
import { bigramGguf, countBigrams } from "../../src/gguf/bigram";
import { familyGguf } from "../../src/gguf/families";
import type { GgufFile } from "../../src/gguf/writer";

export const INFILL_FIXTURE_PATH = join(import.meta.dir, "..", "fixtures", "llama-server-infill.json");

export const INFILL_CONTEXT = 1024;
export const INFILL_BATCH = 512;
/** Greedy, this many tokens: enough to tell two prompts' completions apart. */
export const INFILL_PREDICT = 12;

export interface InfillCase {
  name: string;
  body: { input_prefix: string; input_suffix: string; input_extra?: { filename?: string; text: string }[]; prompt?: string };
}

/** A Python-like line `i` of a long file, several tokens long. */
const line = (i: number) => `    total_${i} = compute(value_${i}, scale=${i % 7}) + offset  # step ${i}\n`;
const lines = (from: number, count: number) => Array.from({ length: count }, (_, i) => line(from + i)).join("");

export const INFILL_CASES: InfillCase[] = [
  { name: "plain", body: { input_prefix: "def add(a, b):\n    ", input_suffix: "\n\nprint(add(1, 2))\n" } },
  {
    name: "files and a start",
    body: {
      input_prefix: "from util import scale\n\ndef run(x):\n    ",
      input_suffix: "\n    return y\n",
      input_extra: [
        { filename: "util.py", text: "def scale(x, k=2):\n    return x * k\n" },
        { text: "# notes with no file name; <|fim_prefix|> typed as text\n" },
      ],
      prompt: "y = scale(",
    },
  },
  {
    name: "special tokens' texts",
    body: { input_prefix: "s = '<|im_end|><|file_sep|>'\n", input_suffix: "<|fim_middle|> stays text\n", prompt: "t = <|im_start|>" },
  },
  // The text before outgrows three quarters of a batch and the text after a quarter: both are cut.
  { name: "long prefix and suffix", body: { input_prefix: lines(0, 60), input_suffix: lines(60, 40), prompt: "x" } },
  // The other files outgrow what the context holds beyond a batch: their oldest tokens are cut.
  {
    name: "long files",
    body: {
      input_prefix: "def main():\n    ",
      input_suffix: "\n",
      input_extra: [
        { filename: "a.py", text: lines(100, 40) },
        { filename: "b.py", text: lines(140, 40) },
      ],
    },
  },
];

export interface InfillAnswer {
  /** The prompt as llama-server evaluated it: its tokens (from its slot's saved state) and its text (special tokens written). */
  tokens: number[];
  prompt: string;
  /** The greedy completion, plain and as the stream's pieces joined. */
  content: string;
  streamed: string;
}

/**
 * qwen2-coder's tokenizer and FIM tokens, and bigrams of one code-like text only, so that its
 * greedy completion is that text over and over, a line indented and a blank line in it:
 * "d\n\te\n\nf" (tokens: d, line break, tab, e, two line breaks, f). llama-server's `n_indent`
 * ends it at the tab's line (2) or at the blank line (1).
 */
export function indentModelGguf(): GgufFile {
  const preset = familyGguf("qwen2-coder");
  const tokenizer = Object.fromEntries(Object.entries(preset.metadata).filter(([key]) => key.startsWith("tokenizer.")));
  const texts = (tokenizer["tokenizer.ggml.tokens"] as { items: readonly string[] }).items;
  const id = (text: string) => {
    const index = texts.indexOf(text);
    if (index < 0) throw new Error(`qwen2-coder's vocabulary has no ${JSON.stringify(text)}`);
    return index;
  };
  // Byte-level spellings: Ċ a line break, ĉ a tab. Three rounds, so each token's most frequent successor loops back.
  const round = ["d", "Ċ", "ĉ", "e", "ĊĊ", "f"].map(id);
  return bigramGguf("parley-qwen2-coder-indent", countBigrams([[...round, ...round, ...round]], texts.length, id("<|im_end|>")), tokenizer, "qwen2");
}

/** What the indentation cases ask: a greedy completion, `n_indent` the case's. */
export const INDENT_BODY = { input_prefix: "def f():\n", input_suffix: "\n", n_predict: INFILL_PREDICT, temperature: 0 };
export const INDENT_CASES = [0, 1, 2];

/** llama-server's answer to an indentation case, as Parley's must be. */
export interface IndentAnswer {
  content: string;
  stop_type: string;
  has_new_line: boolean;
  truncated: boolean;
  tokens_predicted: number;
}

/**
 * Sampler chains drawn with a seed on the indentation model, whose line breaks are tokens that begin
 * one another (one break, two): llama.vscode's and llama.vim's request (`top_k`, `top_p`, `infill`),
 * the same without the infill sampler (another completion), and a temperature before it.
 */
export const CHAIN_BODY = { input_prefix: "def f():\n", input_suffix: "\n", n_predict: 24, top_k: 40, top_p: 0.99, temperature: 2 };
export const CHAIN_CASES: Record<string, string[]> = {
  "llama.vscode": ["top_k", "top_p", "infill"],
  "no infill": ["top_k", "top_p"],
  "temperature, then infill": ["top_k", "temperature", "infill"],
};
export const CHAIN_SEEDS = [1, 2, 3, 4, 5, 6];

export interface InfillFixture {
  /** The preset file llama-server was given. */
  sha256: string;
  answers: Record<string, InfillAnswer>;
  /** llama-server's completions of `CHAIN_BODY` on the indentation model, by case, a content a seed (`CHAIN_SEEDS`). */
  chains: Record<string, string[]>;
  /** The indentation model's file (indentModelGguf) and llama-server's answers on it, by `n_indent`. */
  indent: { sha256: string; answers: Record<string, IndentAnswer> };
}

export const readInfillFixture = async (): Promise<InfillFixture> => (await Bun.file(INFILL_FIXTURE_PATH).json()) as InfillFixture;
