import { describe, expect, test } from "bun:test";
import { callReply } from "../../src/gguf/call-replies";
import { CALL_REPLIES } from "../../src/gguf/corpus";
import { type SplitText, ToolCallText } from "../../src/llm/tool-call-text";
import { type ToolSyntax, toolSyntaxOf } from "../../src/llm/tool-syntax";
import { type Random, withSeed } from "../support";

const HERMES = toolSyntaxOf("{{ '<tool_call>' }}");
const LLAMA3 = toolSyntaxOf("{{ '<|python_tag|>' }}");
const MISTRAL = toolSyntaxOf("{{ '[TOOL_CALLS]' }}");
const NAMES = new Set(["get_weather", "get_time"]);

interface Seen {
  content: string;
  /** The closed calls, their arguments parsed. */
  calls: { name: string; arguments: unknown }[];
  /** The content shown after each piece: never taken back, so each is a prefix of the last. */
  shown: string[];
}

/** Feeds `text` in the pieces `cuts` makes of it, its calls streamed when `constrained`. */
function split(syntax: ToolSyntax, text: string, cuts: readonly number[] = [], constrained = false): Seen {
  const splitter = new ToolCallText(syntax, NAMES, () => constrained);
  const seen: Seen = { content: "", calls: [], shown: [] };
  const streamed = new Map<number, { id: string; name: string; arguments: string }>();
  const take = ({ content, parts }: SplitText) => {
    seen.content += content;
    for (const part of parts) {
      if (part.part === "open") streamed.set(part.index, { id: part.id, name: part.name, arguments: "" });
      else if (part.part === "arguments") streamed.get(part.index)!.arguments += part.text;
      else {
        // The parts, put together, are the closed call.
        expect(streamed.get(part.index)).toEqual(part.call);
        seen.calls.push({ name: part.call.name, arguments: JSON.parse(part.call.arguments) });
      }
    }
    seen.shown.push(seen.content);
  };
  let at = 0;
  for (const end of [...cuts, text.length]) {
    take(splitter.push(text.slice(at, end), at));
    at = end;
  }
  take(splitter.flush());
  return seen;
}

const randomCuts = (random: Random, text: string) => Array.from({ length: random.int(0, 8) }, () => random.int(0, text.length)).sort((a, b) => a - b);

const CASES: [string, ToolSyntax, string, { content: string; calls: { name: string; arguments: string }[] }][] = [
  [
    "Hermes: text, then two calls",
    HERMES,
    'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>',
    {
      content: "Let me look.",
      calls: [
        { name: "get_weather", arguments: '{"city":"Paris"}' },
        { name: "get_time", arguments: '{"zone":"CET"}' },
      ],
    },
  ],
  [
    "Hermes: a string holding braces and the closing tag",
    HERMES,
    '<tool_call>\n{"name": "get_time", "arguments": {"zone": "}</tool_call>{\\""}}\n</tool_call>',
    { content: "", calls: [{ name: "get_time", arguments: '{"zone":"}</tool_call>{\\""}' }] },
  ],
  [
    "Hermes: a call of a function not offered is dropped, markup and all",
    HERMES,
    'Hm.<tool_call>\n{"name": "rm", "arguments": {}}\n</tool_call>',
    { content: "Hm.", calls: [] },
  ],
  ["Hermes: a call cut short is dropped", HERMES, 'Sure.<tool_call>\n{"name": "get_weather", "arguments": {"ci', { content: "Sure.", calls: [] }],
  ["Hermes: a text that only looks like an opener's start is content", HERMES, "a <tool and <tool_ca", { content: "a <tool and <tool_ca", calls: [] }],
  [
    "Llama 3: a bare JSON call, its arguments under parameters",
    LLAMA3,
    ' {"name": "get_weather", "parameters": {"city": "Rome"}}',
    { content: "", calls: [{ name: "get_weather", arguments: '{"city":"Rome"}' }] },
  ],
  ["Llama 3: a reply that is JSON but no call stays text", LLAMA3, '{"answer": 42} is it.', { content: '{"answer": 42} is it.', calls: [] }],
  [
    "Llama 3: a call after <|python_tag|>",
    LLAMA3,
    '<|python_tag|>{"name": "get_time", "parameters": {}}',
    { content: "", calls: [{ name: "get_time", arguments: "{}" }] },
  ],
  [
    "Llama 3: text first, then JSON, is text",
    LLAMA3,
    'Here: {"name": "get_time", "parameters": {}}',
    { content: 'Here: {"name": "get_time", "parameters": {}}', calls: [] },
  ],
  [
    "Mistral: a list of calls, each counted as it closes, also when the list is cut",
    MISTRAL,
    '[TOOL_CALLS] [{"name": "get_time", "arguments": {"zone": "UTC"}}, {"name": "get_weather", "arguments": {"city": "Ro',
    { content: "", calls: [{ name: "get_time", arguments: '{"zone":"UTC"}' }] },
  ],
];

describe("ToolCallText", () => {
  /** The expectation with its calls' arguments parsed, as `Seen` has them. */
  const parsed = ({ content, calls }: (typeof CASES)[number][3]) => ({
    content,
    calls: calls.map((call) => ({ ...call, arguments: JSON.parse(call.arguments) as unknown })),
  });

  test.each(CASES)("%s", (_, syntax, text, expected) => {
    for (const constrained of [false, true]) {
      const { content, calls } = split(syntax, text, [], constrained);
      expect({ content, calls }).toEqual(parsed(expected));
    }
  });

  test(
    "cut anywhere, the same content and calls; content is never taken back, and no opener is ever shown",
    withSeed(async (random) => {
      for (let round = 0; round < 200; round++) {
        const [, syntax, text, expected] = random.pick(CASES);
        const seen = split(syntax, text, randomCuts(random, text), random.next() < 0.5);
        expect({ content: seen.content, calls: seen.calls }).toEqual(parsed(expected));
        for (const [i, shown] of seen.shown.entries()) {
          expect(seen.content.startsWith(shown)).toBe(true);
          if (i > 0) expect(shown.startsWith(seen.shown[i - 1]!)).toBe(true);
        }
        if (expected.calls.length > 0) for (const opener of syntax.openers) expect(seen.content).not.toContain(opener);
      }
    }),
  );

  test("ids are OpenAI's form, or nine letters and digits for Mistral, whose template requires them", () => {
    const idOf = (syntax: ToolSyntax, text: string) => {
      const [open] = new ToolCallText(syntax, NAMES).push(text, 0).parts;
      return open?.part === "open" ? open.id : undefined;
    };
    expect(idOf(HERMES, '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>')).toMatch(/^call_[A-Za-z0-9]{24}$/);
    expect(idOf(MISTRAL, '[TOOL_CALLS] [{"name": "get_time", "arguments": {}}]')).toMatch(/^[A-Za-z0-9]{9}$/);
  });

  test("a call held by a grammar streams: opened at its name, its arguments as they come, closed with its object", () => {
    const splitter = new ToolCallText(HERMES, NAMES, () => true);
    const pieces = ['<tool_call>\n{"name": "get_w', 'eather", "arguments": {"ci', 'ty": "Pa', 'ris"}}\n</tool', "_call>"];
    const parts = pieces.map((piece, i) => splitter.push(piece, pieces.slice(0, i).join("").length).parts.map((part) => part.part));
    expect(parts).toEqual([[], ["open", "arguments"], ["arguments"], ["arguments", "close"], []]);
  });

  test("where the text after an opener begins is told, for a grammar that holds from there", () => {
    const splitter = new ToolCallText(HERMES, NAMES);
    splitter.push("Sure.", 0);
    expect(splitter.openedAt).toBeUndefined();
    splitter.push("<tool_call>", 5);
    expect(splitter.openedAt).toBe(16);
  });

  test("the generated models' replies of calls, in each syntax, read back as the corpus's calls", () => {
    for (const syntax of [HERMES, LLAMA3, MISTRAL]) {
      for (const call of CALL_REPLIES) {
        const splitter = new ToolCallText(syntax, new Set([call.name]));
        const text = callReply(syntax, call);
        const parts = [...splitter.push(text, 0).parts, ...splitter.flush().parts];
        const closed = parts.flatMap((part) => (part.part === "close" ? [part.call] : []));
        expect(
          closed.map(({ name, arguments: args }) => ({ name, arguments: JSON.parse(args) })),
          `${syntax.name}: ${text}`,
        ).toEqual([call]);
      }
    }
  });
});
