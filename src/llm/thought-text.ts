/**
 * A reasoning model's reply opens with its thought (`<think>…</think>`, or whichever markers its
 * chat template uses) and then answers. The split is made on the generated text as it streams:
 * only text that could still become a marker, or the whitespace a template puts around one, is
 * held back; everything else goes out at once, tagged as reasoning or answer.
 *
 * Only a thought that opens the reply is one: a marker later in the answer is the answer's text
 * (a model explaining `<think>` tags, say), as llama-server's reasoning parsers read it too.
 */
import { type ChatWrapper, LlamaText } from "node-llama-cpp";
import type { TextPiece } from "./types";

export interface ThoughtMarkers {
  /** Opens the thought at the reply's start; absent when the template opens it in the prompt. */
  open?: string;
  close: string;
}

/**
 * The thought markers of a chat format, as node-llama-cpp's wrapper knows them, or undefined for
 * a format without thoughts. Compared without their surrounding whitespace: templates differ in
 * the newlines they put around a marker (Qwen's `<think>\n`, DeepSeek's `<think>`), models too.
 * Markers spelled by control tokens (gpt-oss's Harmony channels) never reach the decoded text:
 * such thoughts are not split.
 */
export function thoughtMarkersOf(chatWrapper: ChatWrapper): ThoughtMarkers | undefined {
  const thought = chatWrapper.settings.segments?.thought;
  // A thought without an end marker could never be told from the answer.
  if (thought?.suffix === undefined) return undefined;
  const close = LlamaText(thought.suffix).toString().trim();
  const { prefix } = thought;
  const opensInPrompt = typeof prefix === "object" && !LlamaText.isLlamaText(prefix);
  const open = opensInPrompt ? undefined : LlamaText(prefix).toString().trim();
  return close === "" || open === "" ? undefined : { open, close };
}

/** A piece and where its text starts in the generated text (markers and trimmed whitespace are in none). */
export interface PlacedPiece extends TextPiece {
  at: number;
}

type State = "start" | "thoughtStart" | "thought" | "answerStart" | "answer";

export type ThoughtPhase = "before" | "thought" | "after";

const leadingSpace = (text: string) => text.length - text.trimStart().length;

/** Splits one reply's generated text, given in pieces, into reasoning and answer. */
export class ThoughtText {
  private state: State;
  private held = "";
  /** Generated characters before `held`. */
  private offset = 0;

  constructor(private readonly markers: ThoughtMarkers) {
    this.state = markers.open === undefined ? "thoughtStart" : "start";
  }

  /** Where the reply is: before a thought may open, in it, or past it (its answer begun, or never a thought). */
  get phase(): ThoughtPhase {
    return this.state === "start" ? "before" : this.state === "thoughtStart" || this.state === "thought" ? "thought" : "after";
  }

  /** What of `text` (with what was held) is known to be reasoning or answer, in order. */
  push(text: string): PlacedPiece[] {
    this.held += text;
    const out: PlacedPiece[] = [];
    while (this.step(out));
    return out;
  }

  /** At the reply's end: what was held is what it seemed, or the answer when it never became a thought. */
  flush(): PlacedPiece[] {
    const out: PlacedPiece[] = [];
    if (this.state === "start" || this.state === "answer") this.take(this.held.length, "content", out);
    // A thought cut short (by the reply's token cap) keeps what it said, less the whitespace around its end.
    else if (this.state === "thought") this.take(this.held.trimEnd().length, "reasoning", out);
    this.held = "";
    return out;
  }

  /** Moves on through `held`; false once it must wait for more text. */
  private step(out: PlacedPiece[]): boolean {
    const { open, close } = this.markers;
    switch (this.state) {
      case "start": {
        const space = leadingSpace(this.held);
        const rest = this.held.slice(space);
        if (rest.startsWith(open!)) {
          this.skip(space + open!.length);
          this.state = "thoughtStart";
          return true;
        }
        if (open!.startsWith(rest)) return false;
        this.state = "answer";
        return true;
      }
      case "thoughtStart":
      case "answerStart":
        this.skip(leadingSpace(this.held));
        if (this.held === "") return false;
        this.state = this.state === "thoughtStart" ? "thought" : "answer";
        return true;
      case "thought": {
        const end = this.held.indexOf(close);
        if (end >= 0) {
          const thought = this.held.slice(0, end).trimEnd().length;
          this.take(thought, "reasoning", out);
          this.skip(end - thought + close.length);
          this.state = "answerStart";
          return true;
        }
        // The end of the text may begin the close marker, and whitespace before it is trimmed.
        const safe = this.held.slice(0, this.held.length - partialLength(this.held, close)).trimEnd().length;
        this.take(safe, "reasoning", out);
        return false;
      }
      case "answer":
        this.take(this.held.length, "content", out);
        return false;
    }
  }

  /** Releases the first `length` held characters as one piece. */
  private take(length: number, kind: TextPiece["kind"], out: PlacedPiece[]): void {
    if (length > 0) out.push({ kind, text: this.held.slice(0, length), at: this.offset });
    this.skip(length);
  }

  /** Drops the first `length` held characters (a marker, whitespace around one). */
  private skip(length: number): void {
    this.held = this.held.slice(length);
    this.offset += length;
  }
}

/** The length of the longest end of `text` that begins `marker` without completing it. */
function partialLength(text: string, marker: string): number {
  for (let length = Math.min(marker.length - 1, text.length); length > 0; length--) {
    if (text.endsWith(marker.slice(0, length))) return length;
  }
  return 0;
}
