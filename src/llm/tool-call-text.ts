/**
 * A reply's answer split into the text before its tool calls and the calls, as it streams. Text
 * that could still become a call's opener is held back, never shown and then taken back; from the
 * opener on, everything is the calls' section: each call's JSON object in it is parsed as it
 * closes. No markup of a call ever reaches the content.
 */
import type { ToolCall } from "./tools";
import type { ToolSyntax } from "./tool-syntax";

export interface SplitText {
  content: string;
  /** Where `content` starts in the generated text. */
  at: number;
  calls: ToolCall[];
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

  constructor(
    private readonly syntax: ToolSyntax,
    /** The names calls may have. */
    private readonly names: ReadonlySet<string>,
  ) {}

  /** `text`, generated at `at` (right after what came before), split into what is safe to show and the calls that completed. */
  push(text: string, at: number): SplitText {
    if (this.plain) return { content: this.say(text), at, calls: [] };
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
      const { calls } = this.scan(all.slice(after), start + after);
      return { content: this.say(all.slice(0, opener.at).trimEnd()), at: start, calls };
    }
    // Held: what could still begin an opener, and the whitespace before it, which a call would make needless.
    const shown = all.slice(0, all.length - this.partialOpener(all)).trimEnd().length;
    return this.hold(all, start, shown);
  }

  /** At the reply's end: what was held is content; a call left unfinished (cut by the token limit) is dropped. */
  flush(): SplitText {
    const rest = this.held;
    this.held = "";
    if (!this.opened) return { content: rest, at: this.heldAt, calls: [] };
    // A bare value left open that named no call yet is as likely text as a call cut short.
    return { content: this.syntax.bareJson && this.count === 0 ? this.section : "", at: this.sectionAt, calls: [] };
  }

  /** Shows `all` up to `shown`, holding the rest. */
  private hold(all: string, start: number, shown: number): SplitText {
    this.held = all.slice(shown);
    this.heldAt = start + shown;
    return { content: this.say(all.slice(0, shown)), at: start, calls: [] };
  }

  private say(text: string): string {
    if (/\S/.test(text)) this.spoke = true;
    return text;
  }

  private scan(text: string, at: number): SplitText {
    if (this.section === "") this.sectionAt = at;
    this.section += text;
    const calls: ToolCall[] = [];
    for (const object of this.scanner.push(text)) {
      const call = this.callOf(object);
      if (call === undefined && this.syntax.bareJson && this.count === 0) {
        // Not a call: a reply that happens to be JSON.
        this.plain = true;
        this.opened = false;
        return { content: this.say(this.section), at: this.sectionAt, calls };
      }
      if (call) calls.push(call);
    }
    return { content: "", at, calls };
  }

  /** The call a JSON object of the section is; undefined if it is none. */
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

/**
 * The JSON objects in a stream of text, each as soon as it closes: those outside any value, and
 * those right inside a list (Mistral's calls are one list: each call counts once it closes, also
 * when the list is cut short). Text between them is skipped.
 */
class JsonObjects {
  /** The open objects' and lists' brackets, outermost first. */
  private readonly open: string[] = [];
  /** The text of the object being read, from its `{`. */
  private object = "";
  private inString = false;
  private escaped = false;

  push(text: string): string[] {
    const objects: string[] = [];
    for (const char of text) {
      const depth = this.open.length;
      if (depth === 0 && char !== "{" && char !== "[") continue;
      // An object is read from its brace at the top, or right inside a top-level list.
      if (depth === 1 && this.open[0] === "[" && char === "{") this.object = "";
      if (depth === 0 && char === "{") this.object = "";
      this.object += char;
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (char === "\\") this.escaped = true;
        else if (char === '"') this.inString = false;
        continue;
      }
      if (char === '"') this.inString = true;
      else if (char === "{" || char === "[") this.open.push(char);
      else if (char === "}" || char === "]") {
        const closed = this.open.pop();
        const top = this.open.length === 0 || (this.open.length === 1 && this.open[0] === "[");
        if (closed === "{" && char === "}" && top) objects.push(this.object);
      }
    }
    return objects;
  }
}
