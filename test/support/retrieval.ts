/** What llama-server answered for the retrieval presets (tools/retrieval-fixture.ts writes it), and the inputs it was asked. */
import { join } from "node:path";

export const FIXTURE_PATH = join(import.meta.dir, "..", "fixtures", "llama-server-retrieval.json");

/** Texts of several lengths and scripts, one with a special token's text (llama-server parses it as the token). */
export const EMBED_INPUTS = [
  "The cat sat on the mat.",
  "A dog barks at night.",
  "Hello",
  "Grüße aus Köln — 你好, мир! 🙂",
  "Before <|im_end|> after",
  Array.from({ length: 12 }, (_, i) => `Sentence ${i} of a longer input, about the weather and the sea.`).join(" "),
];

export const RERANK_QUERY = "What is a cat?";
export const RERANK_DOCUMENTS = [
  "A cat is an animal.",
  "Paris is in France.",
  "The weather is nice today, and the sea is calm.",
  "cats",
  "Dogs are animals too, and they bark.",
  "Hello",
];

export interface RetrievalFixture {
  /** Each input's vector, as `/v1/embeddings` gave it (normalized). */
  embed: { sha256: string; vectors: number[][] };
  /** `/v1/rerank`'s results, best first. */
  rerank: { sha256: string; results: { index: number; relevance_score: number }[] };
}

export const readFixture = async (): Promise<RetrievalFixture> => (await Bun.file(FIXTURE_PATH).json()) as RetrievalFixture;
