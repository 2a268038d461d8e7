/**
 * OpenAI's chat-completions protocol over the same engine, keys, limits, logs and metrics: a
 * second framing of the same turn. Stateless like OpenAI's: the client sends the history.
 * Fields OpenAI defines and Parley does not use are dropped by validation (docs/API.md lists them).
 */
import { Elysia, type TSchema, t } from "elysia";
import type { CompletionInput, CompletionService } from "../../chat/completions";
import { modelLoading } from "../../chat/turn-runner";
import { InvalidInput, NotFound } from "../../errors";
import type { Turn } from "../../llm/engine";
import { requireKey } from "../auth";
import { type BodyLimits, jsonBody } from "../json-body";
import { chatCompletionResponse, jsonResponse, openAiErrorResponses } from "../openapi";
import { completionFraming, completionJson, modelJson, newCompletion } from "../openai/present";
import type { TurnDriver } from "../turn-driver";

/** OpenAI lets a client send null for any optional field it does not set. */
const optional = <T extends TSchema>(schema: T, error: string) => t.Optional(t.Union([schema, t.Null()], { error }));

const MESSAGE_RULE = "each message needs a role (system, developer, user or assistant) and text content: a string or [{type: \"text\", text}]";

const message = t.Object(
  {
    role: t.Union([t.Literal("system"), t.Literal("developer"), t.Literal("user"), t.Literal("assistant")], { error: MESSAGE_RULE }),
    content: t.Union([t.String(), t.Array(t.Object({ type: t.Literal("text"), text: t.String() })), t.Null()], { error: MESSAGE_RULE }),
    // An assistant's thought as this API returned it: the chat template decides whether the model sees it.
    reasoning_content: optional(t.String(), "reasoning_content must be a string"),
  },
  { error: MESSAGE_RULE },
);

const completionRequest = t.Object({
  messages: t.Array(message, { minItems: 1, error: `messages must be a non-empty array; ${MESSAGE_RULE}` }),
  model: optional(t.String(), "model must be a string"),
  temperature: optional(t.Number({ minimum: 0, maximum: 2 }), "temperature must be a number from 0 to 2"),
  top_p: optional(t.Number({ exclusiveMinimum: 0, maximum: 1 }), "top_p must be a number above 0, at most 1"),
  max_tokens: optional(t.Integer({ minimum: 1 }), "max_tokens must be a positive integer"),
  max_completion_tokens: optional(t.Integer({ minimum: 1 }), "max_completion_tokens must be a positive integer"),
  seed: optional(t.Integer(), "seed must be an integer"),
  stop: optional(
    t.Union([t.String({ minLength: 1 }), t.Array(t.String({ minLength: 1 }), { maxItems: 4 })]),
    "stop must be a non-empty string or an array of up to 4",
  ),
  stream: optional(t.Boolean(), "stream must be true or false"),
  stream_options: optional(t.Object({ include_usage: optional(t.Boolean(), "include_usage must be true or false") }), "stream_options must be an object"),
  n: optional(t.Literal(1), "n must be 1: Parley generates one choice"),
  user: optional(t.String(), "user must be a string"),
});

type CompletionRequest = typeof completionRequest.static;

/** OpenAI's `developer` role is its newer name for `system`. */
const toTurn = ({ role, content, reasoning_content }: CompletionRequest["messages"][number]): Turn => ({
  role: role === "developer" ? "system" : role,
  content: typeof content === "string" ? content : (content ?? []).map((part) => part.text).join(""),
  ...(role === "assistant" && reasoning_content ? { reasoning: reasoning_content } : {}),
});

function completionInput(body: CompletionRequest): Omit<CompletionInput, "signal" | "userId"> {
  const messages = body.messages.map(toTurn);
  const stop = typeof body.stop === "string" ? [body.stop] : (body.stop ?? undefined);
  // A lone surrogate is no text the model can be given (the native API refuses it the same way).
  if (![...messages.flatMap((turn) => [turn.content, turn.reasoning ?? ""]), ...(stop ?? [])].every((text) => text.isWellFormed())) {
    throw new InvalidInput("messages", "messages and stop must be valid Unicode text (one has a lone surrogate)");
  }
  return {
    messages,
    // OpenAI's default.
    temperature: body.temperature ?? 1,
    topP: body.top_p ?? undefined,
    maxTokens: body.max_completion_tokens ?? body.max_tokens ?? undefined,
    // The engine's seeds are 32-bit; OpenAI's are any integer.
    seed: body.seed == null ? undefined : body.seed >>> 0,
    stop,
  };
}

export interface OpenAiRouteDeps {
  completions: CompletionService;
  turns: TurnDriver;
  body: BodyLimits;
}

export const openAiRoutes = (deps: OpenAiRouteDeps) => {
  const loadedModel = () => {
    const model = deps.completions.model();
    if (!model) throw modelLoading();
    return model;
  };
  return new Elysia({ name: "parley/routes/openai" })
    .use(requireKey)
    .post(
      "/v1/chat/completions",
      async function* ({ body, principal, request, server, set }) {
        const input = completionInput(body);
        const turn = (signal: AbortSignal) => deps.completions.complete({ ...input, userId: principal.userId, signal });
        const identity = newCompletion();
        if (body.stream !== true) {
          const result = await deps.turns.complete(request, turn);
          return result && completionJson(identity, result);
        }
        const framing = completionFraming(identity, body.stream_options?.include_usage === true);
        yield* deps.turns.stream({ request, set, server, keyId: principal.keyId }, turn, framing);
      },
      {
        auth: "key",
        body: completionRequest,
        parse: jsonBody(deps.body),
        detail: {
          summary: "OpenAI-compatible chat completion (stateless; JSON, or Server-Sent Events with stream: true)",
          tags: ["OpenAI-compatible"],
          responses: {
            "200": chatCompletionResponse,
            ...openAiErrorResponses("invalid_json", "invalid_input", "unauthorized", "payload_too_large", "unsupported_media_type", "rate_limited", "overloaded"),
          },
        },
      },
    )
    .get("/v1/models", () => ({ object: "list" as const, data: [modelJson(loadedModel())] }), {
      auth: "key",
      detail: {
        summary: "OpenAI-compatible: the loaded model",
        tags: ["OpenAI-compatible"],
        responses: { "200": jsonResponse("The one model Parley serves", "OpenAiModelList"), ...openAiErrorResponses("unauthorized", "rate_limited", "overloaded") },
      },
    })
    // Clients encode a slash in a model's name (%2F), so one segment holds any name.
    .get(
      "/v1/models/:model",
      ({ params }) => {
        const model = loadedModel();
        if (params.model !== model.id) throw new NotFound("no such model: GET /v1/models lists the one Parley serves");
        return modelJson(model);
      },
      {
        auth: "key",
        detail: {
          summary: "OpenAI-compatible: one model, by id",
          tags: ["OpenAI-compatible"],
          responses: { "200": jsonResponse("The model", "OpenAiModel"), ...openAiErrorResponses("not_found", "unauthorized", "rate_limited", "overloaded") },
        },
      },
    );
};
