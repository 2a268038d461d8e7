/** What the mixed load's clients draw: their messages and how each turn goes, and how a request ended. */
import type { Random } from "./random";

const WORDS = "the a sea hill river light wind stone tell me about why how when long short story calm night morning road city".split(" ");

export function message(random: Random): string {
  return Array.from({ length: random.int(3, 43) }, () => WORDS[random.int(0, WORDS.length - 1)]).join(" ");
}

/** How a request ended: as it should (its kind, the prompt tokens reused), or how not. */
export type Ending = { ok: string; cached?: number } | { failure: string };

/**
 * How a client's turn goes: its first two requests a plain reply and a whole stream, whatever the
 * draws after them (a short run may make only a few); then streamed half the time, a quarter of
 * those streams left after 1 to 5 pieces.
 */
export function drawTurn(random: Random, turn: number): { stream: boolean; cancelAfter: number | undefined } {
  const drawn = turn > 1;
  const stream = drawn ? random.next() < 0.5 : turn === 1;
  return { stream, cancelAfter: drawn && stream && random.next() < 0.25 ? random.int(1, 5) : undefined };
}
