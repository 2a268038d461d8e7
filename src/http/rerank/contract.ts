/**
 * Reranking as llama-server serves it (`/v1/rerank`, `/rerank`), in the shape Jina's and Cohere's
 * rerank APIs share: a query, documents, the best `top_n` back, best first.
 */
import { t } from "elysia";
import { integer, optional, UNKNOWN_FIELD } from "../sampling-fields";

export const RerankRequest = t.Object(
  {
    model: optional(t.String(), "model must be a string"),
    query: t.String({ minLength: 1, error: "query must be a non-empty string" }),
    documents: t.Array(t.String({ minLength: 1 }), { minItems: 1, maxItems: 1024, error: "documents must be an array of 1 to 1024 non-empty strings" }),
    top_n: optional(integer({ minimum: 1 }), "top_n must be a positive integer"),
    return_documents: optional(t.Boolean(), "return_documents must be true or false"),
  },
  UNKNOWN_FIELD,
);
export type RerankRequest = typeof RerankRequest.static;

export const RerankResponse = t.Object({
  model: t.String(),
  object: t.Literal("list"),
  usage: t.Object({ prompt_tokens: integer({ minimum: 0 }), total_tokens: integer({ minimum: 0 }) }),
  results: t.Array(
    t.Object({
      index: integer({ minimum: 0 }),
      relevance_score: t.Number(),
      document: t.Optional(t.Object({ text: t.String() })),
    }),
  ),
});
export type RerankResponse = typeof RerankResponse.static;
