/**
 * A JSON Schema `pattern` as a grammar rule of the whole JSON string, for the regular subset a
 * grammar holds exactly (as llama.cpp's json-schema-to-grammar does): anchored at both ends
 * (`^…$`); literal characters, `.`, classes `[a-z0-9_]` with `\d \w`, groups `(…)` and `(?:…)`,
 * alternatives `|`, and the quantifiers `? * + {n} {n,} {n,m}` (at most `maxRepeat` times). Every
 * character is one a JSON string holds unescaped: no quote, backslash or control character.
 * Anything else (lookarounds, back-references, `\b`, lazy quantifiers, negated classes, `\s`)
 * gives undefined: the pattern is then one the grammar cannot enforce.
 */

/** What a JSON string's character may be, unescaped; also what `.` matches. */
const ANY_CHAR = '[^"\\\\\\x7F\\x00-\\x1F]';
const CLASS_ESCAPES: Record<string, string> = { d: "0-9", w: "a-zA-Z0-9_" };
/** Characters a pattern escapes to take literally, and a JSON string holds unescaped. */
const LITERAL_ESCAPES = new Set([..."^$.|?*+()[]{}-/"]);

class Unsupported extends Error {}

/** `pattern` as a GBNF expression of the JSON string (its quotes included), or undefined outside the subset. */
export function patternRule(pattern: string, maxRepeat: number): string | undefined {
  if (!pattern.startsWith("^") || !pattern.endsWith("$") || pattern.endsWith("\\$")) return undefined;
  const source = pattern.slice(1, -1);
  let at = 0;
  const fail = (): never => {
    throw new Unsupported();
  };
  const peek = () => source[at];
  const safe = (char: string) => {
    const code = char.codePointAt(0)!;
    if (char === '"' || char === "\\" || code < 0x20 || code === 0x7f) fail();
    return char;
  };
  const literal = (char: string) => `"${safe(char)}"`;

  const alternatives = (): string => {
    const options = [sequence()];
    while (peek() === "|") {
      at++;
      options.push(sequence());
    }
    return options.length === 1 ? options[0]! : `(${options.join(" | ")})`;
  };
  const sequence = (): string => {
    const items: string[] = [];
    while (at < source.length && peek() !== "|" && peek() !== ")") items.push(quantified(atom()));
    return items.length === 0 ? '""' : items.join(" ");
  };
  const atom = (): string => {
    const char = source[at++]!;
    if (char === ".") return ANY_CHAR;
    if (char === "(") {
      if (source.startsWith("?:", at)) at += 2;
      else if (peek() === "?") fail();
      const inner = alternatives();
      if (source[at++] !== ")") fail();
      return `(${inner})`;
    }
    if (char === "[") return characterClass();
    if (char === "\\") {
      const escaped = source[at++] ?? fail();
      if (escaped in CLASS_ESCAPES) return `[${CLASS_ESCAPES[escaped]}]`;
      if (LITERAL_ESCAPES.has(escaped)) return literal(escaped);
      return fail();
    }
    if ("?*+{}]^$".includes(char)) fail();
    return literal(char);
  };
  const characterClass = (): string => {
    if (peek() === "^") fail();
    // llama.cpp's grammar escapes only `]` in a class: a literal dash goes last.
    let members = "";
    let dash = "";
    const member = (char: string) => (char === "-" ? ((dash = "-"), "") : char === "]" ? "\\]" : safe(char));
    while (peek() !== "]") {
      const char = source[at++] ?? fail();
      if (char === "[") fail();
      if (char === "\\") {
        const escaped = source[at++] ?? fail();
        if (escaped in CLASS_ESCAPES) members += CLASS_ESCAPES[escaped];
        else if (LITERAL_ESCAPES.has(escaped)) members += member(escaped);
        else fail();
        continue;
      }
      if (peek() === "-" && source[at + 1] !== "]" && char !== "-") {
        at++;
        const end = source[at++] ?? fail();
        if (end === "\\" || end === "[" || end === "]") fail();
        members += `${safe(char)}-${safe(end)}`;
      } else members += member(char);
    }
    at++;
    if (members === "" && dash === "") fail();
    return `[${members}${dash}]`;
  };
  const quantified = (item: string): string => {
    const char = peek();
    if (char === "?" || char === "*" || char === "+") {
      at++;
      if (peek() === "?" || peek() === "+") fail();
      return `${item}${char}`;
    }
    if (char !== "{") return item;
    const bound = /^\{(\d+)(,(\d*))?\}/.exec(source.slice(at)) ?? fail();
    at += bound[0].length;
    if (peek() === "?" || peek() === "+") fail();
    const min = Number(bound[1]);
    const max = bound[2] === undefined ? min : bound[3] === "" ? undefined : Number(bound[3]);
    if (min > maxRepeat || (max !== undefined && (max > maxRepeat || max < min))) fail();
    return `${item}{${min}${bound[2] === undefined ? "" : `,${max ?? ""}`}}`;
  };

  try {
    const body = alternatives();
    if (at !== source.length) return undefined;
    return `"\\"" ${body} "\\""`;
  } catch (error) {
    if (error instanceof Unsupported) return undefined;
    throw error;
  }
}
