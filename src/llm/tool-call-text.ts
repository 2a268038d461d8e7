/**
 * A reply's answer split into the text before its tool calls and the calls, as it streams. Text
 * that could still become a call's opener is held back, never shown and then taken back; from the
 * opener on, everything is the calls' section, made of the calls' JSON objects. A call held by a
 * grammar streams as it is written: opened once its name is known, its arguments' text as it
 * comes, closed with its object. Any other is given whole once its object closes and parses as a
 * call of an offered function. No markup of a call ever reaches the content.
 */

import type { ToolSyntax } from "./tool-syntax";
import type { ToolCall } from "./tools";
import type { ToolCallPart } from "./types";

export interface SplitText {
  content: string;
  /** Where `content` starts in the generated text. */
  at: number;
  /** The parts of calls written in the text: see `ToolCallPart`. */
  parts: ToolCallPart[];
}

/** A call object's start, up to where its arguments begin: its name first, as grammars write it. */
const CALL_HEAD = /^\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"(?:arguments|parameters)"\s*:\s*$/;

/** A call's head is its name (at most 64 characters, maybe escaped) and a little JSON: past this, no head is coming. */
const MAX_HEAD = 512;

/** A call being streamed: opened, its arguments' text so far, whether they are still being written. */
interface Streaming {
  index: number;
  id: string;
  name: string;
  arguments: string;
  writing: boolean;
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export class ToolCallText {
  /** Text not yet shown: a possible opener's start, or whitespace that would stand before a call. */
  private held = "";
  /** Where `held` starts in the generated text. */
  private heldAt = 0;
  /** Whether anything but whitespace was shown: a bare JSON call can only open the reply. */
  private spoke = false;
  /** The calls' section has begun: every character after goes to the scanner. */
  private opened = false;
  /** A bare JSON value that turned out not to be a call: the reply is text after all. */
  private plain = false;
  private readonly scanner = new JsonObjects();
  /** The section's text as generated: the reply's text, should a bare JSON value be no call. */
  private section = "";
  private sectionAt = 0;
  private count = 0;
  /** Where in the generated text the text after a call's opener begins, once the model wrote one. */
  openedAt: number | undefined;

  /** The call being streamed, if any. */
  private streaming: Streaming | undefined;

  constructor(
    private readonly syntax: ToolSyntax,
    /** The names calls may have. */
    private readonly names: ReadonlySet<string>,
    /** Whether the reply is now held by a grammar: its calls can stream, they will be well formed. */
    private readonly constrained: () => boolean = () => false,
  ) {}

  /** `text`, generated at `at` (right after what came before), split into what is safe to show and the parts of calls it holds. */
  push(text: string, at: number): SplitText {
    if (this.plain) return { content: this.say(text), at, parts: [] };
    if (this.opened) return this.scan(text, at);
    const start = this.held === "" ? at : this.heldAt;
    const all = this.held + text;
    this.held = "";
    if (this.syntax.bareJson && !this.spoke) {
      const first = all.search(/\S/);
      if (first < 0) return this.hold(all, start, 0);
      if (all[first] === "{") {
        this.opened = true;
        return this.scan(all.slice(first), start + first);
      }
    }
    const opener = this.firstOpener(all);
    if (opener !== undefined) {
      this.opened = true;
      const after = opener.at + opener.text.length;
      this.openedAt = start + after;
      const { parts } = this.scan(all.slice(after), start + after);
      return { content: this.say(all.slice(0, opener.at).trimEnd()), at: start, parts };
    }
    // Held: what could still begin an opener, and the whitespace before it, which a call would make needless.
    const shown = all.slice(0, all.length - this.partialOpener(all)).trimEnd().length;
    return this.hold(all, start, shown);
  }

  /** At the reply's end: what was held is content; a call left unfinished (cut by the token limit) is dropped. */
  flush(): SplitText {
    const rest = this.held;
    this.held = "";
    if (!this.opened) return { content: rest, at: this.heldAt, parts: [] };
    // A bare value left open that named no call yet is as likely text as a call cut short.
    return { content: this.syntax.bareJson && this.count === 0 ? this.section : "", at: this.sectionAt, parts: [] };
  }

  /** Shows `all` up to `shown`, holding the rest. */
  private hold(all: string, start: number, shown: number): SplitText {
    this.held = all.slice(shown);
    this.heldAt = start + shown;
    return { content: this.say(all.slice(0, shown)), at: start, parts: [] };
  }

  private say(text: string): string {
    if (/\S/.test(text)) this.spoke = true;
    return text;
  }

  private scan(text: string, at: number): SplitText {
    if (this.section === "") this.sectionAt = at;
    this.section += text;
    const parts: ToolCallPart[] = [];
    for (const char of text) {
      const streaming = this.streaming;
      const closed = this.scanner.push(char);
      if (streaming?.writing) {
        // The arguments begin at their value's first character, so their text is exactly the value.
        if (streaming.arguments === "" && /\s/.test(char)) continue;
        streaming.arguments += char;
        // The arguments' value closed: the scanner is back at the call object's depth.
        if (this.scanner.depth === this.scanner.objectDepth) streaming.writing = false;
        appendArguments(parts, streaming.index, char);
      } else if (!streaming && this.scanner.current !== undefined && this.scanner.current.length <= MAX_HEAD && this.constrained()) {
        this.open(this.scanner.current, parts);
      }
      if (closed === undefined) continue;
      if (this.streaming) {
        const { index, id, name } = this.streaming;
        parts.push({ part: "close", index, call: { id, name, arguments: this.streaming.arguments } });
        this.streaming = undefined;
        continue;
      }
      const call = this.callOf(closed);
      if (call === undefined && this.syntax.bareJson && this.count === 0) {
        // Not a call: a reply that happens to be JSON.
        this.plain = true;
        this.opened = false;
        return { content: this.say(this.section), at: this.sectionAt, parts };
      }
      if (call) {
        const index = this.count - 1;
        parts.push({ part: "open", index, id: call.id, name: call.name }, { part: "arguments", index, text: call.arguments }, { part: "close", index, call });
      }
    }
    return { content: "", at, parts };
  }

  /** Opens the call whose object begins `head`, once its name is known and its arguments begin. */
  private open(head: string, parts: ToolCallPart[]): void {
    const match = CALL_HEAD.exec(head);
    if (!match) return;
    let name: unknown;
    try {
      name = JSON.parse(match[1]!);
    } catch {
      return;
    }
    if (typeof name !== "string" || !this.names.has(name)) return;
    const index = this.count++;
    this.streaming = { index, id: this.syntax.newId(), name, arguments: "", writing: true };
    parts.push({ part: "open", index, id: this.streaming.id, name });
  }

  /** The call a whole JSON object of the section is; undefined if it is none. */
  private callOf(text: string): ToolCall | undefined {
    let item: Json;
    try {
      item = JSON.parse(text) as Json;
    } catch {
      return undefined;
    }
    if (typeof item !== "object" || item === null || Array.isArray(item)) return undefined;
    const { name } = item;
    const args = item[this.syntax.argumentsKey] ?? item.arguments ?? {};
    if (typeof name !== "string" || !this.names.has(name)) return undefined;
    this.count++;
    return { id: this.syntax.newId(), name, arguments: typeof args === "string" ? args : JSON.stringify(args) };
  }

  private firstOpener(text: string): { at: number; text: string } | undefined {
    let first: { at: number; text: string } | undefined;
    for (const opener of this.syntax.openers) {
      const at = text.indexOf(opener);
      if (at >= 0 && (first === undefined || at < first.at)) first = { at, text: opener };
    }
    return first;
  }

  /** The length of the longest end of `text` that begins an opener without completing it. */
  private partialOpener(text: string): number {
    let longest = 0;
    for (const opener of this.syntax.openers) {
      for (let length = Math.min(opener.length - 1, text.length); length > longest; length--) {
        if (text.endsWith(opener.slice(0, length))) {
          longest = length;
          break;
        }
      }
    }
    return longest;
  }
}

/** Adds `text` to the last part if it is the same call's arguments, else a part of its own. */
function appendArguments(parts: ToolCallPart[], index: number, text: string): void {
  const last = parts.at(-1);
  if (last?.part === "arguments" && last.index === index) last.text += text;
  else parts.push({ part: "arguments", index, text });
}

/**
 * The JSON objects in a stream of text, read a character at a time: those outside any value, and
 * those right inside a list (Mistral's calls are one list: each call counts once it closes, also
 * when the list is cut short). Text between them is skipped.
 */
class JsonObjects {
  /** The open objects' and lists' brackets, outermost first. */
  private readonly open: string[] = [];
  /** The text of the object being read, from its `{`; undefined between objects. */
  current: string | undefined;
  /** How deep the object being read begins: its brace's depth. */
  objectDepth = 0;
  private inString = false;
  private escaped = false;

  get depth(): number {
    return this.open.length;
  }

  /** Reads `char`: the object it closes, if it closes one. */
  push(char: string): string | undefined {
    const depth = this.open.length;
    if (depth === 0 && char !== "{" && char !== "[") return undefined;
    // An object is read from its brace at the top, or right inside a top-level list.
    if (char === "{" && !this.inString && (depth === 0 || (depth === 1 && this.open[0] === "["))) {
      this.current = "";
      this.objectDepth = depth + 1;
    }
    if (this.current !== undefined) this.current += char;
    if (this.inString) {
      if (this.escaped) this.escaped = false;
      else if (char === "\\") this.escaped = true;
      else if (char === '"') this.inString = false;
      return undefined;
    }
    if (char === '"') this.inString = true;
    else if (char === "{" || char === "[") this.open.push(char);
    else if (char === "}" || char === "]") {
      const closed = this.open.pop();
      if (closed === "{" && char === "}" && this.open.length === this.objectDepth - 1 && this.current !== undefined) {
        const object = this.current;
        this.current = undefined;
        return object;
      }
    }
    return undefined;
  }
}
