import { describe, expect, test } from "bun:test";
import { DeepSeekChatWrapper, GeneralChatWrapper, QwenChatWrapper } from "node-llama-cpp";
import { ReplyText } from "../../src/llm/reply-text";
import { type ThoughtMarkers, ThoughtText, thoughtMarkersOf } from "../../src/llm/thought-text";
import type { ReplyPiece } from "../../src/llm/types";
import { type Random, withSeed } from "../support";

const THINK: ThoughtMarkers = { open: "<think>", close: "</think>" };

interface Split {
  reasoning: string;
  content: string;
}

const joined = (pieces: readonly ReplyPiece[], into: Split = { reasoning: "", content: "" }): Split => {
  for (const piece of pieces) {
    if (piece.kind !== "content" && piece.kind !== "reasoning") throw new Error("no reply here calls a tool or asks log-probabilities");
    into[piece.kind] += piece.text;
  }
  return into;
};

/** Feeds `pieces` to a splitter, recording what had been released after each. */
function split(markers: ThoughtMarkers, pieces: readonly string[]): { after: Split[]; final: Split } {
  const splitter = new ThoughtText(markers);
  const released: Split = { reasoning: "", content: "" };
  const after = pieces.map((piece) => ({ ...joined(splitter.push(piece), released) }));
  return { after, final: joined(splitter.flush(), released) };
}

/**
 * The split of `received`, written independently of the splitter: a reply is a thought when it
 * opens with `<think>` (after whitespace); the thought is trimmed, and so is the answer's start.
 * Before the end, text that could still complete a marker, and whitespace before it, is not shown.
 */
function oracle(received: string, ended: boolean): Split {
  const opened = /^\s*<think>([\s\S]*)$/.exec(received);
  if (!opened) {
    const couldOpen = !ended && "<think>".startsWith(received.trimStart());
    return { reasoning: "", content: couldOpen ? "" : received };
  }
  const body = opened[1]!;
  const close = body.indexOf("</think>");
  if (close >= 0) return { reasoning: body.slice(0, close).trim(), content: body.slice(close + "</think>".length).trimStart() };
  if (ended) return { reasoning: body.trim(), content: "" };
  let partial = 0;
  for (let length = 1; length < "</think>".length && length <= body.length; length++) if (body.endsWith("</think>".slice(0, length))) partial = length;
  return { reasoning: body.slice(0, body.length - partial).trim(), content: "" };
}

function randomCuts(random: Random, text: string, longest = 5): string[] {
  const pieces: string[] = [];
  for (let at = 0; at < text.length; ) {
    const length = random.int(1, longest);
    pieces.push(text.slice(at, at + length));
    at += length;
  }
  return pieces;
}

const WORDS = ["<think>", "</think>", "<th", "</", "think>", "<", "\n", "\n\n", " ", "x", "yz", "think"];

describe("ThoughtText", () => {
  test("a thought at the reply's start is reasoning; the answer after it is content, both trimmed", () => {
    expect(split(THINK, ["<think>\nI should greet.\n</think>\n\nHello!"]).final).toEqual({ reasoning: "I should greet.", content: "Hello!" });
    expect(split(THINK, ["<", "thi", "nk>", "\nA", " b\n", "</thi", "nk", ">\n", "\nC"]).final).toEqual({ reasoning: "A b", content: "C" });
  });

  test("holds back only what could still be a marker, or whitespace before one", () => {
    const { after } = split(THINK, ["<thi", "nk>\n", "Plan", " it\n", "</", "think>", "\n", "\nDone", " now"]);
    expect(after.map((released) => released.reasoning)).toEqual(["", "", "Plan", "Plan it", "Plan it", "Plan it", "Plan it", "Plan it", "Plan it"]);
    expect(after.map((released) => released.content)).toEqual(["", "", "", "", "", "", "", "Done", "Done now"]);
  });

  test("a reply that does not open with a thought is all content, as generated; a later marker is text", () => {
    expect(split(THINK, ["  Hi", " <think>x</think>"]).final).toEqual({ reasoning: "", content: "  Hi <think>x</think>" });
    expect(split(THINK, [" <th"]).final).toEqual({ reasoning: "", content: " <th" });
    expect(split(THINK, ["\n"]).after).toEqual([{ reasoning: "", content: "" }]);
  });

  test("a thought cut short is reasoning; a template that opens the thought in the prompt starts there", () => {
    expect(split(THINK, ["<think>\nStill going\n</thi"]).final).toEqual({ reasoning: "Still going\n</thi", content: "" });
    expect(split({ close: "</think>" }, ["\nAlready thinking\n</think>\n\nAnswer"]).final).toEqual({ reasoning: "Already thinking", content: "Answer" });
  });

  test(
    "random texts and cuts: after every piece, exactly what the text so far shows; at the end, the whole split",
    withSeed(async (random) => {
      for (let round = 0; round < 2_000; round++) {
        const start = random.next() < 0.7 ? (random.next() < 0.5 ? "<think>" : "\n<think>\n") : "";
        const text = start + Array.from({ length: random.int(0, 12) }, () => WORDS[random.int(0, WORDS.length - 1)]).join("");
        const pieces = randomCuts(random, text);
        const { after, final } = split(THINK, pieces);
        let received = "";
        pieces.forEach((piece, i) => {
          received += piece;
          expect(after[i]).toEqual(oracle(received, false));
        });
        expect(final).toEqual(oracle(text, true));
      }
    }),
  );
});

describe("thoughtMarkersOf", () => {
  test("reads the markers node-llama-cpp's wrappers use, without their whitespace; none for formats without thoughts", () => {
    expect(thoughtMarkersOf(new QwenChatWrapper())).toEqual({ open: "<think>", close: "</think>" });
    expect(thoughtMarkersOf(new DeepSeekChatWrapper())).toEqual({ open: "<think>", close: "</think>" });
    expect(thoughtMarkersOf(new GeneralChatWrapper())).toBeUndefined();
  });
});

describe("ReplyText", () => {
  /** What a client would see, and where in the generated text the reply stopped. */
  function stream(markers: ThoughtMarkers | undefined, stops: string[], pieces: string[]) {
    const reply = new ReplyText(markers, stops);
    const shown: ReplyPiece[] = [];
    for (const piece of pieces) {
      shown.push(...reply.push(piece));
      if (reply.stoppedAt !== undefined) break;
    }
    shown.push(...reply.flush());
    return { ...joined(shown), stoppedAt: reply.stoppedAt };
  }

  test("stop strings apply to the answer only; where one begins is told in the generated text", () => {
    const text = "<think>\nI will say STOP.\n</think>\n\nHello STOP there";
    expect(stream(THINK, ["STOP"], [text])).toEqual({ reasoning: "I will say STOP.", content: "Hello ", stoppedAt: text.lastIndexOf("STOP") });
  });

  test("without markers every piece is content and stops match as before", () => {
    expect(stream(undefined, ["happy to"], ["I", " am", " happy", " to", " help"])).toEqual({ reasoning: "", content: "I am ", stoppedAt: 5 });
    expect(stream(undefined, [], ["<think>", "x</think>y"])).toEqual({ reasoning: "", content: "<think>x</think>y", stoppedAt: undefined });
  });

  test(
    "random replies and cuts: the answer ends where a stop begins, and that place is the stop's in the generated text",
    withSeed(async (random) => {
      for (let round = 0; round < 1_000; round++) {
        const thought = Array.from({ length: random.int(0, 4) }, () => WORDS[random.int(0, WORDS.length - 1)])
          .join("")
          .replaceAll("</think>", "");
        const answer = Array.from({ length: random.int(0, 8) }, () => ["ab", " ", "\n", "c", "STOP", "ST"][random.int(0, 5)]).join("");
        const text = `<think>\n${thought}\n</think>\n\n${answer}`;
        const { content, reasoning, stoppedAt } = stream(THINK, ["STOP"], randomCuts(random, text));
        const expected = oracle(text, true);
        expect(reasoning).toBe(expected.reasoning);
        const stop = expected.content.indexOf("STOP");
        expect(content).toBe(stop < 0 ? expected.content : expected.content.slice(0, stop));
        if (stop < 0) expect(stoppedAt).toBeUndefined();
        else expect(text.slice(stoppedAt!, stoppedAt! + 4) === "STOP" && text.slice(0, stoppedAt).endsWith(content)).toBe(true);
      }
    }),
  );
});
