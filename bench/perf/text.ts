/**
 * Deterministic user messages for the conversation benchmarks: pseudo-words in the bench
 * model's vocabulary style, the same on both sides of every comparison.
 */
const SYLLABLES = ["ba", "ke", "lo", "mi", "nu", "ra", "se", "to", "vi", "zo", "da", "fe", "gu", "hy", "jo", "pa"];

/** About `tokens` tokens of the bench model (its words are one or two tokens each). */
export function userMessage(seed: number, tokens = 50): string {
  let state = (seed * 2654435761) >>> 0 || 1;
  const next = () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return state;
  };
  const words: string[] = [];
  for (let i = 0; i < Math.round(tokens / 1.6); i++) {
    const n = 1 + (next() % 3);
    let word = "";
    for (let s = 0; s < n; s++) word += SYLLABLES[next() % SYLLABLES.length];
    words.push(word);
  }
  return `${words.join(" ")}.`;
}
