/**
 * docs/API.md's table of contents, made from its `##` and `###` headings with GitHub's anchors:
 * `bun run docs` writes it between the file's contents markers, and
 * test/docs/api-examples.test.ts fails while the file holds another.
 */
import { join } from "node:path";

export const API_DOC = join(import.meta.dir, "../docs/API.md");
const OPEN = "<!-- contents: written by `bun run docs` from the headings below -->";
const CLOSE = "<!-- /contents -->";

/** GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`. */
export const anchorOf = (heading: string) =>
  heading
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, "")
    .replace(/ /g, "-");

/** `text` with its contents rewritten from its headings (outside code blocks). */
export function withContents(text: string): string {
  let fenced = false;
  const entries: string[] = [];
  for (const line of text.split("\n")) {
    if (line.startsWith("```")) fenced = !fenced;
    const heading = fenced ? null : /^(##|###) (.+)$/.exec(line);
    if (heading) entries.push(`${heading[1] === "##" ? "" : "  "}- [${heading[2]!.replace(/([[\]])/g, "\\$1")}](#${anchorOf(heading[2]!)})`);
  }
  const start = text.indexOf(OPEN);
  const end = text.indexOf(CLOSE);
  if (start < 0 || end < start) throw new Error(`${API_DOC} has no contents markers`);
  return `${text.slice(0, start + OPEN.length)}\n${entries.join("\n")}\n${text.slice(end)}`;
}

if (import.meta.main) {
  await Bun.write(API_DOC, withContents(await Bun.file(API_DOC).text()));
}
