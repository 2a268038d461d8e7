/**
 * A grammar for a reasoning model's reply: a free thought between its markers, then the answer
 * held to `grammar` (a JSON one, for a reply format). The thought may hold any text but its
 * close marker, so the grammar and the reply's text agree on where the answer starts
 * (thought-text.ts splits it there).
 */
import type { ThoughtMarkers } from "./thought-text";

/** Up to this many spaces or newlines between the thought and the answer, as templates put them. */
const GAP = "[ \\n]{0,4}";

/**
 * `grammar` (GBNF with a `root` rule) after a thought: the open marker (when the reply opens it),
 * text without the close marker, the close marker, a little whitespace. Rule names are prefixed
 * `parley-thought-`; `grammar`'s root becomes `parley-thought-answer`.
 */
export function thoughtThen(grammar: string, { open, close }: ThoughtMarkers): string {
  if (!/^root ::= /m.test(grammar)) throw new Error("the answer's grammar has no root rule");
  const answer = grammar.replace(/^root ::= /m, "parley-thought-answer ::= ");
  const body = withoutText(close, "parley-thought-body");
  const opening = open === undefined ? "" : `${literal(open)} `;
  return [`root ::= ${opening}parley-thought-body-0 ${literal(close)} ${GAP} parley-thought-answer`, ...body, answer].join("\n");
}

/**
 * Rules `<name>-0` … `<name>-<n-1>` matching any text that does not contain `text` (n characters;
 * its first character must not occur in it again): rule k stands for "the last k characters were
 * the first k of `text`", as a matcher reading the text would track it.
 */
function withoutText(text: string, name: string): string[] {
  const chars = Array.from(text);
  const [first] = chars;
  if (first === undefined || chars.slice(1).includes(first)) throw new Error(`cannot keep ${JSON.stringify(text)} out of a thought`);
  return chars.map((_, k) => {
    const next = chars[k]!;
    const other = k === 0 ? `[^${charClass(first)}] ${name}-0` : `[^${charClass(next)}${charClass(first)}] ${name}-0`;
    const advance = k + 1 < chars.length ? [`${literal(next)} ${name}-${k + 1}`] : [];
    const restart = k === 0 ? [] : [`${literal(first)} ${name}-1`];
    return `${name}-${k} ::= (${[...advance, ...restart, other].join(" | ")})?`;
  });
}

function literal(text: string): string {
  return `"${text.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n")}"`;
}

function charClass(char: string): string {
  return /[\]\\^-]/.test(char) ? `\\${char}` : char === "\n" ? "\\n" : char;
}
