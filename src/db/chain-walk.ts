import type { ChainLink, ConversationItem } from "./types";

/** Characters of text an item puts in a prompt. */
function itemChars(item: ConversationItem): number {
  switch (item.type) {
    case "message":
    case "thought":
      return item.text.length;
    case "toolCall":
      return item.name.length + item.arguments.length;
    case "toolResult":
      return item.output.length;
    case "serverCall":
      return item.name.length + item.arguments.length + (item.output ?? item.error?.message ?? "").length;
    case "approvalRequest":
      return item.name.length + item.arguments.length;
    case "toolList":
    case "approvalResponse":
      // The tools are offered apart from the history; an answer to an approval is a word.
      return 0;
  }
}

/**
 * A chain's links, given newest first, up to and including the one that brings their items' text
 * to `maxChars`; oldest first. Stops reading there, so rows past the bound are never fetched.
 */
export async function walkChain(newestFirst: AsyncIterable<ChainLink> | Iterable<ChainLink>, maxChars: number): Promise<ChainLink[]> {
  const links: ChainLink[] = [];
  let chars = 0;
  for await (const link of newestFirst) {
    links.push(link);
    for (const item of [...link.input, ...link.output]) chars += itemChars(item);
    if (chars >= maxChars) break;
  }
  return links.reverse();
}

/**
 * The chain from one response back, as one recursive query; `$1` is the response's id and `$2`
 * its user (every link must be theirs). Newest first by construction: the recursion steps back.
 */
export const CHAIN_SQL = `WITH RECURSIVE chain(id, previous_id, input, output) AS (
  SELECT id, previous_id, input, output FROM responses WHERE id = $1 AND user_id = $2
  UNION ALL
  SELECT r.id, r.previous_id, r.input, r.output FROM responses r JOIN chain c ON r.id = c.previous_id AND r.user_id = $2
) SELECT id, input, output FROM chain`;
