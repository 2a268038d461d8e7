/**
 * The model listing OpenAI's and Anthropic's clients both ask for at `GET /v1/models`: each in its
 * own shape, Anthropic's when the request says it is Anthropic's (`anthropic-version`, which its
 * SDK always sends, with its key as `x-api-key`), OpenAI's otherwise. Errors follow the same
 * choice (`dialectOf`).
 */
import { Elysia, t } from "elysia";
import { type ModelInfo, modelLoading } from "../../chat/turn-runner";
import { ModelNotFound } from "../../errors";
import { AnthropicModelQuery } from "../anthropic/contract";
import { anthropicModelJson, anthropicModelPage } from "../anthropic/present";
import { requireKey } from "../auth";
import { fromAnthropicClient } from "../errors";
import { modelJson } from "../openai/present";
import { either, eitherErrorResponses } from "../openapi";

export interface ModelRouteDeps {
  /** Every model, the default first. */
  models(): ModelInfo[];
}

const TAGS = ["OpenAI-compatible", "Anthropic-compatible"];

export const modelRoutes = (deps: ModelRouteDeps) => {
  /** None while the only model is still loading. */
  const models = () => {
    const listed = deps.models();
    if (listed.length === 0) throw modelLoading();
    return listed;
  };
  return (
    new Elysia({ name: "parley/routes/models" })
      .use(requireKey)
      .get(
        "/v1/models",
        ({ request, query }) =>
          fromAnthropicClient(request.headers) ? anthropicModelPage(models(), query) : { object: "list" as const, data: models().map(modelJson) },
        {
          auth: "key",
          query: AnthropicModelQuery,
          detail: {
            summary:
              "The models Parley serves, the default first: OpenAI's list (each marked loaded or not), or with anthropic-version Anthropic's page (limit, after_id, before_id)",
            tags: TAGS,
            responses: {
              "200": either("The models Parley serves", "OpenAiModelList", "AnthropicModelList"),
              ...eitherErrorResponses("invalid_input", "unauthorized", "rate_limited", "overloaded"),
            },
          },
        },
      )
      // Clients encode a slash in a model's name (%2F), so one segment holds any name.
      .get(
        "/v1/models/:model",
        ({ params, request }) => {
          const model = models().find((listed) => listed.id === params.model);
          if (!model) throw new ModelNotFound(`no model ${JSON.stringify(params.model)}: GET /v1/models lists them`);
          return fromAnthropicClient(request.headers) ? anthropicModelJson(model) : modelJson(model);
        },
        {
          auth: "key",
          params: t.Object({ model: t.String() }),
          detail: {
            summary: "One model, by id, in OpenAI's shape or (with anthropic-version) Anthropic's",
            tags: TAGS,
            responses: {
              "200": either("The model", "OpenAiModel", "AnthropicModel"),
              ...eitherErrorResponses("model_not_found", "unauthorized", "rate_limited", "overloaded"),
            },
          },
        },
      )
  );
};
