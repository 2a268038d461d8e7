/**
 * Finds, in a Markdown document, the measured figures that cite no result file and the paths of
 * one machine (issue #64). The rules, kept simple so a writer can predict them:
 *
 * - A block is a paragraph, a list item (its continuation lines, not its nested items), a table
 *   or a fenced block; a table or fenced block is one block with the paragraph right above it.
 * - A measured figure is a number next to a unit of measure: a rate (`tok/s`, `tokens/s`,
 *   `req/s`, `inputs/s`), a time (`µs`, `ms`, `s`, `min`, `minutes`) where it is what something took or its
 *   sentence says it was measured (`took`, `median`, `against`, ...), a multiple (`1.39×`), a quotient
 *   (`562 ÷ 560`), a percentage, a size of memory (`MiB`, `MB`, `GiB`, ...) in a sentence about
 *   memory held (resident, RSS, heap, idle, peak), or a ratio written with two decimals
 *   (`0.97`) in a block that names llama-server; in a table, a cell that is a bare number where
 *   the header or the sentence above the table names a unit. Numbers in inline code are settings,
 *   not figures.
 * - A number is a limit, not a figure, where a bound word comes right before it (`default`,
 *   `under`, `within`, `at most`, `up to`, `every`, `target`, `≤`, ...: BOUND below) or where its
 *   sentence names a setting (`PARLEY_...`).
 * - A block with a figure must cite a result file: `bench/results/<name>`, or a glob of names
 *   (`*-perf-B14.json`, `bench/results/*-gpu-h100-*.json`) matching at least one file there.
 * - A machine path is an absolute path into a checkout or a home (`/work/`, `/home/`, `/root/`,
 *   `/Users/`, a named entry under `/tmp/`), or a relative one that climbs out of the repository
 *   (`../shared/...` in prose; a Markdown link's target is the document's own, checked by the
 *   reader). System paths (`/etc/`, `/var/lib/`, `/usr/`, `/dev/shm`, `/tmp` itself) are fine.
 */

export interface Block {
  /** 1-based line of the block's first line. */
  line: number;
  text: string;
}

export interface Finding {
  line: number;
  what: string;
}

const ITEM = /^\s*(?:[-*+]|\d+\.)\s/;
const FENCE = /^\s*(```|~~~)/;
const TABLE = /^\s*\|/;

/** The document's blocks, in order (headings are blocks of their own). */
export function blocks(markdown: string): Block[] {
  const lines = markdown.split("\n");
  const found: Block[] = [];
  let current: Block | undefined;
  /** The last block ended by a blank line or a heading: a table or fence right after joins it. */
  let previous: Block | undefined;
  let blank = 0;
  const close = () => {
    if (current) found.push(current);
    previous = current;
    current = undefined;
  };
  for (let index = 0; index < lines.length; index++) {
    const line = lines[index]!;
    if (FENCE.test(line)) {
      const fence: string[] = [line];
      while (++index < lines.length && !FENCE.test(lines[index]!)) fence.push(lines[index]!);
      fence.push(lines[index] ?? "");
      attachOrStart(fence.join("\n"), index + 1 - fence.length + 1);
      continue;
    }
    if (line.trim() === "") {
      if (current) close();
      blank++;
      continue;
    }
    if (TABLE.test(line) && !current?.text.split("\n").at(-1)?.trimStart().startsWith("|")) {
      attachOrStart(line, index + 1);
      blank = 0;
      continue;
    }
    if (line.startsWith("#") || ITEM.test(line) || !current) {
      close();
      current = { line: index + 1, text: line };
      if (line.startsWith("#")) close();
    } else current.text += `\n${line}`;
    blank = 0;
  }
  close();
  return found;

  /** A table or fence joins the paragraph right above it (at most one blank line between). */
  function attachOrStart(text: string, line: number) {
    const above = current ?? (blank <= 1 ? previous : undefined);
    if (above && !above.text.startsWith("#")) {
      if (!current) {
        found.pop();
        current = above;
      }
      current.text += `\n${text}`;
    } else {
      close();
      current = { line, text };
    }
    blank = 0;
  }
}

const NUMBER = String.raw`\d[\d,]*(?:\.\d+)?(?:\s?[–-]\s?\d[\d,]*(?:\.\d+)?)?`;
/** Words after which a number is a limit, a default or a target, not a measurement. */
const BOUND =
  /(?:\b(?:default|defaults|under|below|within|at most|at least|up to|than|every|after|limit|cap|budget|timeout|target|targets|bound|maximum|minimum)|[≤≥<>=])\s*(?:about\s*|~)?$/i;
/** Words after a number that make it a bound. */
const BOUND_AFTER = /^\s*(?:at most|at the latest|or less|or more)\b/;
/** A time is a measurement where it is what something took, or where its sentence says it was measured. */
const TOOK = /\b(?:in|took|takes|take)\s*~?$/;
const MEASURED = /\b(?:took|takes|ran|measured|median|medians|mean|average|p\d\d|against|here|faster|slower)\b/;
const MEMORY = /\b(?:resident|RSS|RssAnon|RssFile|heap|idle|peak|anonymous|memory)\b/i;
const SETTING = /\bPARLEY_[A-Z_]+/;

const RULES: { unit: string; pattern: RegExp; applies?: (sentence: string, block: string, before: string) => boolean }[] = [
  { unit: "rate", pattern: new RegExp(String.raw`(${NUMBER})\s?(?:tok/s|tokens/s|req/s|inputs/s|tokens a second|inputs a second)`, "g") },
  {
    unit: "time",
    pattern: new RegExp(String.raw`(${NUMBER})\s?(?:µs|ms|s|min|minutes|seconds)\b`, "g"),
    applies: (sentence, _block, before) => TOOK.test(before) || MEASURED.test(sentence),
  },
  { unit: "multiple", pattern: new RegExp(String.raw`(${NUMBER})\s?×(?!\s?\d)`, "g") },
  { unit: "quotient", pattern: new RegExp(String.raw`(${NUMBER})(?:\s?(?:ms|tok/s))?\s?÷\s?\d`, "g") },
  { unit: "percentage", pattern: new RegExp(String.raw`(${NUMBER})\s?%`, "g") },
  {
    unit: "memory",
    pattern: new RegExp(String.raw`(${NUMBER})\s?(?:KiB|MiB|GiB|KB|MB|GB)\b`, "g"),
    applies: (sentence) => MEMORY.test(sentence),
  },
  {
    unit: "ratio",
    pattern: /(?<![\d.])(\d\.\d\d)(?![\d.]*\d|\s?×)/g,
    applies: (_sentence, block) => /llama-server/.test(block),
  },
];

/** Inline code holds settings and commands: blanked out, its length kept. */
const withoutCode = (text: string) => text.replace(/`[^`\n]*`/g, (code) => " ".repeat(code.length));

/** The sentence around `at`: from the last sentence end before it to the next after it. */
function sentenceAt(text: string, at: number): string {
  const ends = /[.;:!?](?=\s)|\n(?=\s*\|)/g;
  let start = 0;
  let end = text.length;
  for (const match of text.matchAll(ends)) {
    if (match.index! < at) start = match.index! + match[0].length;
    else {
      end = match.index!;
      break;
    }
  }
  return text.slice(start, end);
}

const TABLE_UNIT = /tok\/s|tokens\/s|req\/s|inputs\/s|\bms\b|\bMiB\b|\bMB\b|÷|×/;
const BARE_NUMBER = /^\s*\d[\d,]*(?:\.\d+)?(?:\s*\([^)]*\))?\s*$/;

/** A table's cells that are bare numbers, where its header or the sentence above it names their unit. */
function tableFigures(text: string): string[] {
  const lines = text.split("\n");
  const first = lines.findIndex((line) => TABLE.test(line));
  if (first < 0) return [];
  const above = sentenceAt(lines.slice(0, first).join("\n"), Math.max(0, lines.slice(0, first).join("\n").length - 1));
  if (!TABLE_UNIT.test(`${lines[first]}\n${above}`)) return [];
  return lines
    .slice(first + 1)
    .filter((line) => TABLE.test(line))
    .flatMap((line) => line.split("|").filter((cell) => BARE_NUMBER.test(cell)))
    .map((cell) => cell.trim());
}

/** The measured figures of a block, as written. */
export function figures(block: string): string[] {
  const text = withoutCode(block);
  const found: string[] = tableFigures(text);
  for (const rule of RULES) {
    for (const match of text.matchAll(rule.pattern)) {
      const before = text.slice(Math.max(0, match.index! - 24), match.index!).replaceAll("*", "");
      const after = text.slice(match.index! + match[0].length).replaceAll("*", "");
      const sentence = sentenceAt(text, match.index!);
      if (BOUND.test(before) || BOUND_AFTER.test(after) || SETTING.test(sentenceAt(block, match.index!))) continue;
      if (rule.applies && !rule.applies(sentence, text, before)) continue;
      found.push(match[0].trim());
    }
  }
  return found;
}

/** A citation's names: `bench/results/<name>` or a backquoted glob of result names. */
export function citations(block: string): string[] {
  const paths = Array.from(block.matchAll(/bench\/results\/([^\s`'")\],;]+)/g), (match) => match[1]!.replace(/[.:]$/, ""));
  const globs = Array.from(block.matchAll(/`([^`\s/]*\*[^`\s/]*\.(?:json|txt))`/g), (match) => match[1]!);
  return [...paths, ...globs];
}

/** Whether a cited name or glob names at least one of the result files. */
export function cites(name: string, results: readonly string[]): boolean {
  const pattern = new RegExp(`^${name.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replaceAll("*", ".*")}$`);
  return results.some((file) => pattern.test(file));
}

const MACHINE_PATH = /(?<![\w.~-])(?:\/(?:work|home|root|Users)\/[^\s`)]*|\/tmp\/[\w.-]+|\.\.\/[^\s`)]+)/g;

/** The machine paths of a document, outside Markdown link targets. */
export function machinePaths(markdown: string): Finding[] {
  const found: Finding[] = [];
  markdown.split("\n").forEach((line, index) => {
    for (const match of line.replace(/\]\([^)]*\)/g, "]()").matchAll(MACHINE_PATH)) found.push({ line: index + 1, what: match[0] });
  });
  return found;
}

/** Each block of a document holding a figure but no citation, or citing a result that is not there. */
export function unsourced(markdown: string, results: readonly string[]): Finding[] {
  const found: Finding[] = [];
  for (const block of blocks(markdown)) {
    const measured = figures(block.text);
    const cited = citations(block.text);
    const missing = cited.filter((name) => !cites(name, results));
    if (missing.length > 0) found.push({ line: block.line, what: `cites no result file: ${missing.join(", ")}` });
    else if (measured.length > 0 && cited.length === 0) found.push({ line: block.line, what: `figures without a result file: ${measured.join("; ")}` });
  }
  return found;
}
