// The corpus's tool calls as each chat format writes a reply of a call (llm/tool-syntax.ts): what
// Parley's grammars hold a call to and its parser reads back.

import type { ToolSyntax } from "../llm/tool-syntax";
import { CALL_REPLIES } from "./corpus";

type Call = (typeof CALL_REPLIES)[number];

/** The call as an object, its name first (as grammars write it), spaced as the corpus's JSON is. */
const callObject = (syntax: ToolSyntax, call: Call) =>
  `{"name": ${JSON.stringify(call.name)}, ${JSON.stringify(syntax.argumentsKey)}: ${JSON.stringify(call.arguments).replaceAll('":', '": ').replaceAll(',"', ', "')}}`;

/** A reply of `call` in `syntax`. */
export function callReply(syntax: ToolSyntax, call: Call): string {
  switch (syntax.name) {
    case "hermes":
      return `<tool_call>\n${callObject(syntax, call)}\n</tool_call>`;
    case "mistral":
      return `[TOOL_CALLS] [${callObject(syntax, call)}]`;
    case "llama3":
      return callObject(syntax, call);
  }
}

/** The corpus's replies of calls in `syntax`. */
export const callReplies = (syntax: ToolSyntax): string[] => CALL_REPLIES.map((call) => callReply(syntax, call));

/** `text` as pieces: each of `specials` as itself, the text between as `pieces` spells it. */
export function piecesAround(text: string, specials: readonly string[], pieces: (text: string) => string[]): string[] {
  const escaped = specials.map((special) => special.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  return text.split(new RegExp(`(${escaped.join("|")})`)).flatMap((part, i) => (i % 2 === 1 ? [part] : part === "" ? [] : pieces(part)));
}

/** A piece of line breaks only: "\n" as text, "Ċ" as byte-level BPE spells it. */
const isBreak = (piece: string) => /^[\nĊ]+$/.test(piece);

/**
 * `pieces` with each piece of line breaks joined to the piece after it, unless that is a special
 * token. A line break of its own may be the token an assistant opening ends with, whose context
 * must stay a reply's start (see `Learning.starting`); joined, it is a token only a reply writes
 * (the prompt's tokenizer never makes it), which a call's grammar allows where it asks for a break.
 */
export function joinBreaks(pieces: readonly string[], specials: readonly string[]): string[] {
  const joined: string[] = [];
  for (let i = 0; i < pieces.length; i++) {
    const piece = pieces[i]!;
    const next = pieces[i + 1];
    if (isBreak(piece) && next !== undefined && !specials.includes(next)) {
      joined.push(piece + next);
      i++;
    } else joined.push(piece);
  }
  return joined;
}

/** The line breaks `calls` (pieces) hold of their own that no reply in `words` does: see `Learning.starting`. */
export const loneBreaks = (calls: readonly (readonly string[])[], words: readonly (readonly string[])[]): Set<string> => {
  const inWords = new Set(words.flat().filter(isBreak));
  return new Set(calls.flat().filter((piece) => isBreak(piece) && !inWords.has(piece)));
};
