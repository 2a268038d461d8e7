/**
 * Reranking as llama-server serves it, at `/v1/rerank` and `/rerank`: a query's documents scored
 * by a reranking model, best first, in the shape of Jina's and Cohere's rerank APIs. Errors in
 * OpenAI's shape, as llama-server answers them.
 */
import { Elysia } from "elysia";
import { InvalidInput } from "../../errors";
import { requireKey } from "../auth";
import { namingFields } from "../field-names";
import { jsonBody } from "../json-body";
import { jsonResponse, openAiErrorResponses, RETRIEVAL_REFUSALS } from "../openapi";
import { RerankRequest } from "../rerank/contract";
import { rerankFields } from "../rerank/fields";
import { rerankJson } from "../rerank/present";
import { hooksOf } from "../turn-driver";
import type { RetrievalRouteDeps } from "./embeddings";

export const rerankRoutes = (deps: RetrievalRouteDeps) => {
  const rerank = async ({
    body,
    principal,
    request,
    set,
  }: {
    body: RerankRequest;
    principal: { userId: number };
    request: Request;
    set: { headers: Record<string, unknown> };
  }) => {
    if (!body.query.isWellFormed()) throw new InvalidInput("query", "must be valid Unicode text (it has a lone surrogate)");
    const bad = body.documents.findIndex((document) => !document.isWellFormed());
    if (bad >= 0) throw new InvalidInput(`documents[${bad}]`, "must be valid Unicode text (it has a lone surrogate)");
    const result = await deps.retrieval.rank({
      userId: principal.userId,
      query: body.query,
      documents: body.documents,
      ...(body.model != null ? { model: body.model } : {}),
      ...(body.top_n != null ? { topN: body.top_n } : {}),
      ...hooksOf({ request, set }),
    });
    return result && rerankJson(result, body.return_documents === true ? body.documents : undefined);
  };
  const route = {
    auth: "key" as const,
    body: RerankRequest,
    parse: jsonBody(deps.body),
    detail: {
      summary: "Reranking (llama-server's, Jina's and Cohere's shape): the documents scored against the query by a reranking model, best first",
      tags: ["Retrieval"],
      responses: { "200": jsonResponse("The documents' scores, best first", "RerankResponse"), ...openAiErrorResponses(...RETRIEVAL_REFUSALS) },
    },
  };
  return new Elysia({ name: "parley/routes/rerank" })
    .onBeforeHandle(namingFields(rerankFields))
    .use(requireKey)
    .post("/v1/rerank", rerank, route)
    .post("/rerank", rerank, route);
};
