/**
 * OpenAI's embeddings API (`POST /v1/embeddings`) over Parley's retrieval models: texts or token
 * arrays in, one vector each, normalized to length 1 as llama-server gives them. A field that would
 * change the vectors and that Parley cannot honour is refused by name (docs/API.md).
 */
import { Elysia, t } from "elysia";
import type { RetrievalInput, RetrievalService } from "../../chat/retrieval";
import { InvalidInput } from "../../errors";
import { requireKey } from "../auth";
import { namingFields } from "../field-names";
import { type BodyLimits, jsonBody } from "../json-body";
import { embeddingFields } from "../openai/fields";
import { embeddingListJson } from "../openai/present";
import { jsonResponse, openAiErrorResponses, RETRIEVAL_REFUSALS } from "../openapi";
import { integer, optional, UNKNOWN_FIELD } from "../sampling-fields";
import { hooksOf } from "../turn-driver";

export interface RetrievalRouteDeps {
  retrieval: RetrievalService;
  body: BodyLimits;
}

/** As OpenAI's: at most 2048 inputs a request. */
const MAX_INPUTS = 2048;
const INPUT_RULE = `input must be a non-empty string, an array of up to ${MAX_INPUTS} of them, an array of token ids, or an array of up to ${MAX_INPUTS} such arrays`;
const tokenIds = t.Array(integer({ minimum: 0 }), { minItems: 1 });

const embeddingRequest = t.Object(
  {
    input: t.Union(
      [
        t.String({ minLength: 1 }),
        t.Array(t.String({ minLength: 1 }), { minItems: 1, maxItems: MAX_INPUTS }),
        tokenIds,
        t.Array(tokenIds, { minItems: 1, maxItems: MAX_INPUTS }),
      ],
      {
        error: INPUT_RULE,
      },
    ),
    model: optional(t.String(), "model must be a string"),
    encoding_format: optional(t.Union([t.Literal("float"), t.Literal("base64")]), "encoding_format must be float or base64"),
    dimensions: optional(integer({ minimum: 1 }), "dimensions must be a positive integer"),
    // Changes nothing in the vectors: OpenAI's end-user identifier.
    user: optional(t.String(), "user must be a string"),
  },
  UNKNOWN_FIELD,
);

/** The request's inputs, one a vector: a string, or an array of strings, of token ids, or of arrays of them. */
function inputsOf(input: typeof embeddingRequest.static.input): RetrievalInput[] {
  const items = typeof input === "string" || input.every((item) => typeof item === "number") ? [input as string | number[]] : (input as (string | number[])[]);
  const bad = items.findIndex((item) => typeof item === "string" && !item.isWellFormed());
  if (bad >= 0) throw new InvalidInput(typeof input === "string" ? "input" : `input[${bad}]`, "must be valid Unicode text (it has a lone surrogate)");
  return items;
}

export const embeddingRoutes = (deps: RetrievalRouteDeps) =>
  new Elysia({ name: "parley/routes/embeddings" })
    .onBeforeHandle(namingFields(embeddingFields))
    .use(requireKey)
    .post(
      "/v1/embeddings",
      async ({ body, principal, request, set }) => {
        const result = await deps.retrieval.embed({
          userId: principal.userId,
          inputs: inputsOf(body.input),
          ...(body.model != null ? { model: body.model } : {}),
          ...(body.dimensions != null ? { dimensions: body.dimensions } : {}),
          ...hooksOf({ request, set }),
        });
        return result && embeddingListJson(result, body.encoding_format ?? "float");
      },
      {
        auth: "key",
        body: embeddingRequest,
        parse: jsonBody(deps.body),
        detail: {
          summary: "OpenAI-compatible embeddings: one vector an input, from an embedding model",
          tags: ["OpenAI-compatible"],
          responses: { "200": jsonResponse("The vectors", "OpenAiEmbeddingList"), ...openAiErrorResponses(...RETRIEVAL_REFUSALS) },
        },
      },
    );
