/**
 * Conditions on a reply's lines that end it early, as a code completion wants them: a line less
 * indented than the cursor's leaves the block being completed, and a completion that took long
 * enough ends with the line it is on. They are llama-server's (`n_indent`, `t_max_predict_ms` in
 * `process_token`, tools/server/server-context.cpp), checked as it checks them, once a token, so
 * the same reply ends at the same place:
 *
 * - a line is measured once the reply has a line break: the line at the oldest break not yet passed,
 *   one line a token; when it has a character other than a space or tab (a line break too: a blank
 *   line) after fewer spaces and tabs than asked, the reply ends and is cut before that character;
 * - a token whose text holds a line break, more than the time after the first token, ends the reply
 *   with its text.
 *
 * Text that such a cut could still take back is held: a line's first other character while it is
 * indented too little, and all after it, until the check cuts there or the reply ends otherwise.
 */

export interface StopWhen {
  /** After the reply's first line break, a line indented by fewer spaces and tabs than this ends it (0: never). */
  lineIndentBelow?: number;
  /** A token that writes a line break more than this many milliseconds after the first token ends the reply (0: never). */
  afterMsAtNewLine?: number;
}

const isIndent = (char: string | undefined) => char === " " || char === "\t";

export class LineStop {
  /** The answer as generated, a matched stop string's text left out. */
  private generated = "";
  /** What stop strings let through so far: its length, and whether it had a line break (llama-server's `has_new_line`). */
  private shownLength = 0;
  private hasNewLine = false;
  /** Where the line to measure next begins; 0 before the first line break was passed. */
  private lineAt = 0;
  /** Text shown since the last token's check. */
  private sentThisToken = "";
  private firstTokenAt: number | undefined;
  /** Of the text shown, what was let through; the rest is held. */
  private released = 0;
  private held = "";
  /** The spaces and tabs of the shown text's last line, while it has nothing else and follows a line break. */
  private indent: number | undefined;
  /** Where the reply was cut, when a line's indentation ended it. */
  cutAt: number | undefined;

  constructor(private readonly when: StopWhen) {}

  /** Characters let through so far. */
  get shown(): number {
    return this.released;
  }

  /** The answer's text, as generated (before stop strings hold any of it). */
  add(text: string): void {
    this.generated += text;
  }

  /** Of `visible` (the answer's next text as stop strings let it through), the part that no cut can take back. */
  show(visible: string): string {
    this.sentThisToken += visible;
    const start = this.shownLength;
    this.shownLength += visible.length;
    if (this.cutAt !== undefined) return this.release(visible.slice(0, Math.max(0, this.cutAt - start)));
    const minimum = this.when.lineIndentBelow ?? 0;
    if (this.held !== "" || minimum <= 0) return this.hold(visible, this.held !== "" ? 0 : visible.length);
    for (let i = 0; i < visible.length; i++) {
      const char = visible[i]!;
      if (this.indent !== undefined) {
        if (isIndent(char)) {
          this.indent++;
          continue;
        }
        if (this.indent < minimum) return this.hold(visible, i);
        this.indent = undefined;
      }
      if (char === "\n") this.indent = 0;
    }
    return this.hold(visible, visible.length);
  }

  /**
   * The check after a token (an end-of-generation token too), `stoppedAt` being where a stop string
   * cut the answer: whether the reply ends here.
   */
  check(stoppedAt: number | undefined, now = performance.now()): boolean {
    this.firstTokenAt ??= now;
    if (stoppedAt !== undefined) this.generated = this.generated.slice(0, stoppedAt);
    const sent = this.sentThisToken;
    this.sentThisToken = "";
    let ends = false;
    const minimum = this.when.lineIndentBelow ?? 0;
    if (this.hasNewLine && minimum > 0) {
      const text = this.generated;
      if (this.lineAt > 0) {
        let at = this.lineAt;
        while (isIndent(text[at])) at++;
        if (at < text.length && at - this.lineAt < minimum) {
          this.cut(at);
          ends = true;
        }
      }
      const lineBreak = this.generated.indexOf("\n", this.lineAt);
      if (lineBreak >= 0) this.lineAt = lineBreak + 1;
    }
    if (sent.includes("\n")) {
      this.hasNewLine = true;
      const limit = this.when.afterMsAtNewLine ?? 0;
      if (limit > 0 && now - this.firstTokenAt > limit) ends = true;
    }
    return ends;
  }

  /** At the reply's end: what was held, unless a cut took it back. */
  flush(): string {
    const rest = this.cutAt === undefined ? this.held : "";
    this.held = "";
    return this.release(rest);
  }

  private cut(at: number): void {
    this.cutAt = at;
    this.generated = this.generated.slice(0, at);
    // What was held began where the cut is: the line's first character after its indentation.
    this.held = "";
  }

  /** Lets `visible` through up to `upTo`, holding the rest. */
  private hold(visible: string, upTo: number): string {
    this.held += visible.slice(upTo);
    return this.release(visible.slice(0, upTo));
  }

  private release(text: string): string {
    this.released += text.length;
    return text;
  }
}
