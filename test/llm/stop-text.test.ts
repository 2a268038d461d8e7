import { describe, expect, test } from "bun:test";
import { StopText } from "../../src/llm/stop-text";
import { withSeed } from "../support";

/** Feeds `pieces` through a matcher; what a client would see, and where the reply stopped. */
function stream(stops: string[], pieces: string[]) {
  const matcher = new StopText(stops);
  const shown: string[] = [];
  for (const piece of pieces) {
    shown.push(matcher.push(piece));
    if (matcher.stoppedAt !== undefined) break;
  }
  shown.push(matcher.flush());
  return { shown: shown.filter(Boolean), stoppedAt: matcher.stoppedAt };
}

describe("StopText", () => {
  test("a stop string spanning pieces ends the text where it begins; none of it is shown", () => {
    expect(stream(["happy to"], ["I", " am", " happy", " to", " help"])).toEqual({ shown: ["I", " am", " "], stoppedAt: 5 });
  });

  test("holds back only what a stop string could still complete, and releases it when it cannot", () => {
    const matcher = new StopText(["<END>"]);
    expect(matcher.push("abc<E")).toBe("abc");
    expect(matcher.push("N")).toBe("");
    expect(matcher.push("x")).toBe("<ENx");
    expect(matcher.push("<")).toBe("");
    expect(matcher.flush()).toBe("<");
    expect(matcher.stoppedAt).toBeUndefined();
  });

  test("the earliest of several stop strings wins, also when a later one completes first", () => {
    expect(stream(["abcdef", "cd"], ["ab", "cd", "ef"])).toEqual({ shown: ["ab"], stoppedAt: 2 });
    expect(stream(["bcd", "z"], ["abc", "dz"])).toEqual({ shown: ["a"], stoppedAt: 1 });
  });

  test("without stop strings every piece passes as it is", () => {
    expect(stream([], ["a", "b"])).toEqual({ shown: ["a", "b"], stoppedAt: undefined });
  });

  test(
    "random texts and cuts: what is shown is the text before the first stop present once a piece has arrived",
    withSeed(async (random) => {
      for (let round = 0; round < 500; round++) {
        const alphabet = "ab c";
        const text = Array.from({ length: 1 + Math.floor(random.next() * 30) }, () => alphabet[Math.floor(random.next() * alphabet.length)]).join("");
        const stops = Array.from({ length: 1 + Math.floor(random.next() * 3) }, () =>
          Array.from({ length: 1 + Math.floor(random.next() * 4) }, () => alphabet[Math.floor(random.next() * alphabet.length)]).join(""),
        );
        const pieces: string[] = [];
        for (let at = 0; at < text.length; ) {
          const length = 1 + Math.floor(random.next() * 4);
          pieces.push(text.slice(at, at + length));
          at += length;
        }
        // Generation stops at the first piece that completes a stop string; the reply is cut where the
        // earliest stop string then present begins (one that could only complete later never does).
        let end: number | undefined;
        for (let received = "", i = 0; i < pieces.length && end === undefined; i++) {
          received += pieces[i];
          const present = stops.map((stop) => received.indexOf(stop)).filter((index) => index >= 0);
          if (present.length > 0) end = Math.min(...present);
        }
        const { shown, stoppedAt } = stream(stops, pieces);
        expect(shown.join("")).toBe(text.slice(0, end));
        expect(stoppedAt).toBe(end);
      }
    }),
  );
});
