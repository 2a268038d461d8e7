/** The rerank API's answer (contract.ts). */
import type { RankResult } from "../../chat/retrieval";
import type { RerankResponse } from "./contract";

export const rerankJson = ({ model, ranked, promptTokens }: RankResult, documents?: readonly string[]): RerankResponse => ({
  model,
  object: "list",
  usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
  results: ranked.map(({ index, score }) => ({ index, relevance_score: score, ...(documents ? { document: { text: documents[index]! } } : {}) })),
});
