import { describe, expect, test } from "bun:test";
import { LineStop, type StopWhen } from "../../src/llm/line-stop";
import { ReplyText } from "../../src/llm/reply-text";
import { withSeed } from "../support";

/** A token of a reply: its text (empty for the end-of-generation token) and when it was sampled (ms). */
type Token = { text: string; at: number };

/**
 * llama-server's `process_token`, its `n_indent` and `t_max_predict_ms` checks transliterated
 * (tools/server/server-context.cpp), without stop strings: the text it answers, and the token it
 * stopped at (an end token always stops, after its checks).
 */
function llamaServer(tokens: readonly Token[], nIndent: number, tMaxPredictMs: number): { text: string; stoppedAt?: number } {
  let generated = "";
  let hasNewLine = false;
  let lastNlPos = 0;
  for (let i = 0; i < tokens.length; i++) {
    const { text, at } = tokens[i]!;
    generated += text;
    let stop = text === "";
    if (hasNewLine && nIndent > 0) {
      if (lastNlPos > 0) {
        let pos = lastNlPos;
        let indent = 0;
        while (pos < generated.length && (generated[pos] === " " || generated[pos] === "\t")) {
          indent++;
          pos++;
        }
        if (pos < generated.length && indent < nIndent) {
          stop = true;
          generated = generated.slice(0, pos);
        }
      }
      const pos = generated.indexOf("\n", lastNlPos);
      if (pos !== -1) lastNlPos = pos + 1;
    }
    if (text.includes("\n")) {
      hasNewLine = true;
      if (tMaxPredictMs > 0 && at - tokens[0]!.at > tMaxPredictMs) stop = true;
    }
    if (stop) return { text: generated, stoppedAt: i };
  }
  return { text: generated };
}

/** Parley's: each token's text through a LineStop, as a stream shows it (every piece at the time it is let through). */
function parley(tokens: readonly Token[], when: StopWhen): { text: string; stoppedAt?: number; shownSoFar: string[] } {
  const lines = new LineStop(when);
  let shown = "";
  const shownSoFar: string[] = [];
  let stoppedAt: number | undefined;
  for (let i = 0; i < tokens.length && stoppedAt === undefined; i++) {
    const { text, at } = tokens[i]!;
    lines.add(text);
    shown += lines.show(text);
    shownSoFar.push(shown);
    if (lines.check(undefined, at) || text === "") stoppedAt = i;
  }
  shown += lines.flush();
  return { text: shown, ...(stoppedAt !== undefined ? { stoppedAt } : {}), shownSoFar };
}

const tokensOf = (...texts: string[]): Token[] => texts.map((text, i) => ({ text, at: i }));

describe("LineStop, as llama-server's n_indent", () => {
  test("a line indented less than asked ends the reply before its first character; its indentation stays", () => {
    const tokens = tokensOf("if x:", "\n", "    y = 1", "\n", "  z", " = 2", "\n");
    expect(llamaServer(tokens, 4, 0)).toEqual({ text: "if x:\n    y = 1\n  ", stoppedAt: 4 });
    const { shownSoFar, ...result } = parley(tokens, { lineIndentBelow: 4 });
    expect(result).toEqual({ text: "if x:\n    y = 1\n  ", stoppedAt: 4 });
    // Streamed, the cut line's "z" was never shown.
    expect(shownSoFar.at(-1)).toBe("if x:\n    y = 1\n  ");
  });

  test("a blank line after the first break ends it too; the first line is never measured", () => {
    const tokens = tokensOf("x", "\n", "  a", "\n", "\n", "  b", "\n");
    expect(parley(tokens, { lineIndentBelow: 2 }).text).toBe("x\n  a\n");
    expect(llamaServer(tokens, 2, 0).text).toBe("x\n  a\n");
    expect(parley(tokensOf("x", " y"), { lineIndentBelow: 8 }).text).toBe("x y");
  });

  test("measured a token late, as llama-server measures: a reply that ends first keeps the line, shown at its end", () => {
    const tokens = tokensOf("a\n", "b");
    expect(llamaServer(tokens, 1, 0)).toEqual({ text: "a\nb" });
    const { shownSoFar, text } = parley(tokens, { lineIndentBelow: 1 });
    expect(shownSoFar).toEqual(["a\n", "a\n"]);
    expect(text).toBe("a\nb");
    // The end-of-generation token is one more check, which cuts.
    expect(parley([...tokens, { text: "", at: 2 }], { lineIndentBelow: 1 })).toMatchObject({ text: "a\n", stoppedAt: 2 });
  });
});

describe("LineStop, as llama-server's t_max_predict_ms", () => {
  test("a token with a line break, past the time since the first token, ends the reply with its text", () => {
    const tokens: Token[] = [
      { text: "a", at: 100 },
      { text: "\n", at: 105 },
      { text: "b", at: 112 },
      { text: "c\nd", at: 115 },
      { text: "e", at: 120 },
    ];
    expect(parley(tokens, { afterMsAtNewLine: 10 })).toMatchObject({ text: "a\nbc\nd", stoppedAt: 3 });
    expect(llamaServer(tokens, 0, 10)).toEqual({ text: "a\nbc\nd", stoppedAt: 3 });
    // The first break too, when it comes late.
    expect(parley(tokens, { afterMsAtNewLine: 4 })).toMatchObject({ text: "a\n", stoppedAt: 1 });
  });
});

describe("LineStop against llama-server's checks, on random replies", () => {
  test(
    "the same text and the same stopping token; a stream never shows what the end takes back",
    withSeed(async (random) => {
      const pieces = ["\n", " ", "\t", "  ", "x", "y ", "\n  ", " z\n", "\n\n", "  w\n    v", "\r\n"];
      for (let round = 0; round < 2000; round++) {
        let at = random.int(0, 50);
        const tokens: Token[] = Array.from({ length: random.int(1, 25) }, () => ({ text: random.pick(pieces), at: (at += random.int(0, 4)) }));
        if (random.next() < 0.3) tokens.push({ text: "", at: at + 1 });
        const nIndent = random.int(0, 5);
        const tMax = random.pick([0, 0, 3, 10, 30]);
        const expected = llamaServer(tokens, nIndent, tMax);
        const { shownSoFar, ...result } = parley(tokens, { lineIndentBelow: nIndent, afterMsAtNewLine: tMax });
        expect({ round, ...result }).toEqual({ round, ...expected });
        for (const shown of shownSoFar) expect(expected.text.startsWith(shown)).toBe(true);
      }
    }),
  );
});

describe("ReplyText with stop strings and a line's cut", () => {
  test("a stop string inside the cut line leaves the cut's text; a stop before the line wins", () => {
    const run = (stops: string[], texts: string[]) => {
      const reply = new ReplyText(undefined, stops, undefined, { lineIndentBelow: 2 });
      let shown = "";
      for (const text of texts) {
        for (const piece of reply.push(text)) if (piece.kind === "content") shown += piece.text;
        if (reply.checkLines() || reply.stoppedAt !== undefined) break;
      }
      for (const piece of reply.flush()) if (piece.kind === "content") shown += piece.text;
      return { shown, stoppedAt: reply.stoppedAt };
    };
    expect(run(["END"], ["a", "\n", "  b", "\n", "cEND"])).toEqual({ shown: "a\n  b\n", stoppedAt: 6 });
    expect(run(["b"], ["a", "\n", "  b", "\n", "c"])).toEqual({ shown: "a\n  ", stoppedAt: 4 });
  });
});
