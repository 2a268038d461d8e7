/**
 * How a chat format writes tool calls, as llama-server's chat handlers tell them apart: by what
 * the model's template writes. A template that shows tools itself (Hermes and Qwen's
 * `<tool_call>`, Mistral's `[TOOL_CALLS]`, Llama 3.x's JSON) is given them as it expects; for one
 * that does not, Parley describes the tools in the system prompt and asks for Hermes' form, as
 * llama-server's generic handler asks for its own.
 */
export type ToolSyntaxName = "hermes" | "llama3" | "mistral";

export interface ToolSyntax {
  readonly name: ToolSyntaxName;
  /** The template renders tools, calls and results itself; otherwise Parley does (template-chat.ts). */
  readonly native: boolean;
  /** The key of a call's arguments in the JSON the model writes. */
  readonly argumentsKey: "arguments" | "parameters";
  /** Texts after which a reply's calls follow; none of them is ever shown as content. */
  readonly openers: readonly string[];
  /** A reply that begins with a JSON object may be a call (Llama 3.x writes calls bare). */
  readonly bareJson: boolean;
  /** The text a reply of calls begins with: the opener its calls follow, if any. */
  readonly opener: string;
  /** GBNF for what follows `opener` in a reply of calls, each one `call` (a rule of the call object's grammar). */
  rest(call: string, parallel: boolean): string;
  /** A new call's id, as the format's templates accept ids back. */
  newId(): string;
}

const ALPHANUMERIC = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

function randomAlphanumeric(length: number): string {
  const bytes = crypto.getRandomValues(new Uint8Array(length));
  return Array.from(bytes, (byte) => ALPHANUMERIC[byte % ALPHANUMERIC.length]).join("");
}

/** OpenAI's form of a call id. */
const openAiId = () => `call_${randomAlphanumeric(24)}`;

const hermes = (native: boolean): ToolSyntax => ({
  name: "hermes",
  native,
  argumentsKey: "arguments",
  openers: ["<tool_call>"],
  bareJson: false,
  opener: "<tool_call>",
  rest: (call, parallel) => `"\\n" ${call} "\\n</tool_call>"${parallel ? ` ("\\n<tool_call>\\n" ${call} "\\n</tool_call>")*` : ""}`,
  newId: openAiId,
});

const SYNTAXES = {
  hermes: hermes(true),
  // Llama 3.1's template shows one call per reply: a bare JSON object (`<|python_tag|>` before it
  // for its built-in tools).
  llama3: {
    name: "llama3",
    native: true,
    argumentsKey: "parameters",
    openers: ["<|python_tag|>"],
    bareJson: true,
    opener: "",
    rest: (call) => call,
    newId: openAiId,
  },
  // Mistral's template requires ids of nine letters and digits.
  mistral: {
    name: "mistral",
    native: true,
    argumentsKey: "arguments",
    openers: ["[TOOL_CALLS]"],
    bareJson: false,
    opener: "[TOOL_CALLS]",
    rest: (call, parallel) => `" [" ${call}${parallel ? ` (", " ${call})*` : ""} "]"`,
    newId: () => randomAlphanumeric(9),
  },
} as const satisfies Record<ToolSyntaxName, ToolSyntax>;

/** The syntax of the model whose chat template is `template`. */
export function toolSyntaxOf(template: string | undefined): ToolSyntax {
  if (template === undefined) return hermes(false);
  if (template.includes("[TOOL_CALLS]")) return SYNTAXES.mistral;
  if (template.includes("<tool_call>")) return SYNTAXES.hermes;
  if (template.includes("<|python_tag|>") || (template.includes("ipython") && template.includes('"parameters"'))) return SYNTAXES.llama3;
  return hermes(false);
}

/** A nine-character id Mistral's template accepts, standing for any id a client sent. */
export function mistralId(id: string): string {
  if (/^[a-zA-Z0-9]{9}$/.test(id)) return id;
  const digest = new Bun.CryptoHasher("sha256").update(id).digest();
  return Array.from(digest.subarray(0, 9), (byte) => ALPHANUMERIC[byte % ALPHANUMERIC.length]).join("");
}

/**
 * A reply of calls in `syntax` (`after` its opener: what follows it, for a grammar that holds once
 * the model has written the opener), given the GBNF of one call object (node-llama-cpp's
 * JSON-schema grammar, its `root` the call): that root becomes `parley-call`.
 */
export function callsGrammar(syntax: ToolSyntax, call: string, parallel: boolean, after = false): string {
  if (!/^root ::= /m.test(call)) throw new Error("the call's grammar has no root rule");
  const opener = after || syntax.opener === "" ? "" : `${JSON.stringify(syntax.opener)} `;
  return [`root ::= ${opener}${syntax.rest("parley-call", parallel)}`, call.replace(/^root ::= /m, "parley-call ::= ")].join("\n");
}
