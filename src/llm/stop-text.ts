/**
 * Stop strings, matched on the generated text rather than on tokens: a stop string usually spans
 * several tokens, and the same text can be spelled by different tokens. Text that could still be
 * the start of a stop string is held back, never streamed and then taken back; only as much as a
 * stop string could still complete is held.
 */
export class StopText {
  private held = "";
  /** Characters released so far: where the next piece starts in the whole reply. */
  private released = 0;
  /** The index in the reply where a stop string begins, once one has matched. */
  stoppedAt: number | undefined;
  /** The stop string that matched (the first in the reply; of two there, the first given). */
  matched: string | undefined;

  /** Characters of the reply shown so far. */
  get shown(): number {
    return this.released;
  }

  constructor(private readonly stops: readonly string[]) {}

  /** The part of `piece` (with what was held) that is safe to show; after a match, the text before it. */
  push(piece: string): string {
    if (this.stoppedAt !== undefined) return "";
    const text = this.held + piece;
    const match = this.firstMatch(text);
    if (match !== undefined) {
      this.held = "";
      this.stoppedAt = this.released + match.index;
      this.matched = match.stop;
      return this.release(text.slice(0, match.index));
    }
    const keep = this.partialSuffix(text);
    this.held = text.slice(text.length - keep);
    return this.release(text.slice(0, text.length - keep));
  }

  /** At the reply's end: what was held could not become a stop string after all. */
  flush(): string {
    const rest = this.held;
    this.held = "";
    return this.release(rest);
  }

  private release(text: string): string {
    this.released += text.length;
    return text;
  }

  private firstMatch(text: string): { index: number; stop: string } | undefined {
    let first: { index: number; stop: string } | undefined;
    for (const stop of this.stops) {
      const index = text.indexOf(stop);
      if (index >= 0 && (first === undefined || index < first.index)) first = { index, stop };
    }
    return first;
  }

  /** The length of the longest end of `text` that begins some stop string without completing it. */
  private partialSuffix(text: string): number {
    let longest = 0;
    for (const stop of this.stops) {
      for (let length = Math.min(stop.length - 1, text.length); length > longest; length--) {
        if (text.endsWith(stop.slice(0, length))) {
          longest = length;
          break;
        }
      }
    }
    return longest;
  }
}
