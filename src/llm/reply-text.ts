/**
 * The generated text as a client is shown it: the thought apart from the answer (thought-text.ts),
 * the answer's tool calls apart from its text (tool-call-text.ts), the text cut where a stop
 * string begins (stop-text.ts) and where a condition on its lines ends it (line-stop.ts). Both
 * apply to the answer's text only: a thought or a call's arguments may hold one without ending
 * the reply.
 */
import { append } from "../append";
import { LineStop, type StopWhen } from "./line-stop";
import { StopText } from "./stop-text";
import { type PlacedPiece, type ThoughtMarkers, type ThoughtPhase, ThoughtText } from "./thought-text";
import type { SplitText, ToolCallText } from "./tool-call-text";
import type { ReplyPiece } from "./types";

export class ReplyText {
  private readonly thought: ThoughtText | undefined;
  private readonly stops: StopText;
  private readonly lines: LineStop | undefined;
  /** Generated characters so far, for replies that are all answer. */
  private generated = 0;
  /** Where each answer piece given to `stops` starts: in the answer, and in the generated text. */
  private readonly starts: { answer: number; at: number }[] = [];
  private answerLength = 0;

  constructor(
    markers: ThoughtMarkers | undefined,
    stops: readonly string[],
    /** Present when the reply may call tools. */
    private readonly calls?: ToolCallText,
    stopWhen?: StopWhen,
  ) {
    this.thought = markers && new ThoughtText(markers);
    this.stops = new StopText(stops);
    this.lines = stopWhen && new LineStop(stopWhen);
  }

  /** What of `text` (with what was held) is safe to show, in order. */
  push(text: string): ReplyPiece[] {
    const at = this.generated;
    this.generated += text.length;
    return this.show(this.thought ? this.thought.push(text) : [{ kind: "content", text, at }]);
  }

  /** At the reply's end: what was held and turned out to be neither a marker, a call nor a stop. */
  flush(): ReplyPiece[] {
    const shown = this.show(this.thought?.flush() ?? []);
    if (this.calls) append(shown, this.answer(this.calls.flush()));
    const stopped = this.stops.flush();
    const rest = this.lines ? this.lines.show(stopped) + this.lines.flush() : stopped;
    if (rest !== "") shown.push({ kind: "content", text: rest });
    return shown;
  }

  /** After each token, an end-of-generation one too: whether a condition on the answer's lines ends the reply here. */
  checkLines(): boolean {
    return this.lines?.check(this.stops.stoppedAt) ?? false;
  }

  /** Where the reply is in its thought; "after" for a model without thoughts. */
  get thoughtPhase(): ThoughtPhase {
    return this.thought?.phase ?? "after";
  }

  /** Where in the generated text the answer begins; undefined before it has (in a thought). */
  get answerStart(): number | undefined {
    return this.starts[0]?.at;
  }

  /** How far into the generated text the answer has been shown: what lies before is shown, or no part of it (a thought, markers). */
  get shownThrough(): number {
    const shown = this.lines?.shown ?? this.stops.shown;
    const start = this.starts.findLast((piece) => piece.answer <= shown);
    return start === undefined ? 0 : start.at + shown - start.answer;
  }

  /** The stop string that ended the reply, once one has matched. */
  get stopString(): string | undefined {
    return this.stops.matched;
  }

  /** Where in the generated text the answer was cut, once a stop string matched or a line's indentation ended it. */
  get stoppedAt(): number | undefined {
    const stop = this.answerStop;
    if (stop === undefined) return undefined;
    const start = this.starts.findLast((piece) => piece.answer <= stop)!;
    return start.at + stop - start.answer;
  }

  /** Where in the answer it was cut: the earlier of a stop string and a line's cut. */
  private get answerStop(): number | undefined {
    const stop = this.stops.stoppedAt;
    const cut = this.lines?.cutAt;
    return stop === undefined ? cut : cut === undefined ? stop : Math.min(stop, cut);
  }

  private show(pieces: readonly PlacedPiece[]): ReplyPiece[] {
    const shown: ReplyPiece[] = [];
    for (const { kind, text, at } of pieces) {
      if (kind === "reasoning") shown.push({ kind, text });
      else append(shown, this.answer(this.calls ? this.calls.push(text, at) : { content: text, at, parts: [] }));
    }
    return shown;
  }

  /** The answer's text through the stop strings, then its calls. */
  private answer({ content, at, parts }: SplitText): ReplyPiece[] {
    const shown: ReplyPiece[] = [];
    if (content !== "") {
      const last = this.starts.at(-1);
      // A piece that continues the previous one in the generated text needs no entry of its own.
      if (last === undefined || last.at + this.answerLength - last.answer !== at) this.starts.push({ answer: this.answerLength, at });
      this.answerLength += content.length;
      this.lines?.add(content);
      const stopped = this.stops.push(content);
      const visible = this.lines ? this.lines.show(stopped) : stopped;
      if (visible !== "") shown.push({ kind: "content", text: visible });
    }
    // A stop string or a line's cut before the calls ended the reply there.
    if (this.answerStop === undefined) for (const part of parts) shown.push({ kind: "toolCall", part });
    return shown;
  }
}
