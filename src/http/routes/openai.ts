/**
 * OpenAI's chat-completions protocol over the same engine, keys, limits, logs and metrics: a
 * second framing of the same turn. Stateless like OpenAI's: the client sends the history.
 * Every field is honoured or refused: a field that would change the reply and that Parley cannot
 * honour is `400` naming it, and so is a field OpenAI does not define (docs/API.md lists them).
 */
import { Elysia, t } from "elysia";
import type { CompletionInput, CompletionService } from "../../chat/completions";
import { modelLoading } from "../../chat/turn-runner";
import { InvalidInput, NotFound } from "../../errors";
import type { Turn } from "../../llm/engine";
import { requireKey } from "../auth";
import { optional, SAMPLING_FIELDS, samplingFieldsOf } from "../sampling-fields";
import { formatOf, RESPONSE_FORMAT, RESPONSE_FORMAT_RULE } from "../response-format";
import { type BodyLimits, jsonBody } from "../json-body";
import { chatCompletionResponse, jsonResponse, openAiErrorResponses } from "../openapi";
import { completionFraming, completionJson, modelJson, newCompletion } from "../openai/present";
import type { TurnDriver } from "../turn-driver";


/**
 * A field Parley cannot honour yet: only absent or null passes, and the error says why. It would
 * change the reply, so ignoring it would answer a question the client did not ask.
 */
const unsupported = (error: string) => optional(t.Never(), error);

const MESSAGE_RULE =
  "each message needs a role (system, developer, user or assistant) and text content: a string or [{type: \"text\", text}] (an assistant's also [{type: \"refusal\", refusal}])";

const message = t.Object(
  {
    role: t.Union([t.Literal("system"), t.Literal("developer"), t.Literal("user"), t.Literal("assistant")], { error: MESSAGE_RULE }),
    content: t.Union(
      [t.String(), t.Array(t.Union([t.Object({ type: t.Literal("text"), text: t.String() }), t.Object({ type: t.Literal("refusal"), refusal: t.String() })])), t.Null()],
      { error: MESSAGE_RULE },
    ),
    // An assistant's thought as this API returned it: the chat template decides whether the model sees it.
    reasoning_content: optional(t.String(), "reasoning_content must be a string"),
  },
  { error: MESSAGE_RULE },
);

const completionRequest = t.Object({
  messages: t.Array(message, { minItems: 1, error: `messages must be a non-empty array; ${MESSAGE_RULE}` }),
  model: optional(t.String(), "model must be a string"),
  temperature: optional(t.Number({ minimum: 0, maximum: 2 }), "temperature must be a number from 0 to 2"),
  ...SAMPLING_FIELDS,
  max_tokens: optional(t.Integer({ minimum: 1 }), "max_tokens must be a positive integer"),
  max_completion_tokens: optional(t.Integer({ minimum: 1 }), "max_completion_tokens must be a positive integer"),
  seed: optional(t.Integer(), "seed must be an integer"),
  stop: optional(
    t.Union([t.String({ minLength: 1 }), t.Array(t.String({ minLength: 1 }), { maxItems: 4 })]),
    "stop must be a non-empty string or an array of up to 4",
  ),
  stream: optional(t.Boolean(), "stream must be true or false"),
  stream_options: optional(
    t.Object({
      include_usage: optional(t.Boolean(), "include_usage must be true or false"),
      // Padding against a side channel of OpenAI's network; Parley's chunks carry none.
      include_obfuscation: optional(t.Boolean(), "include_obfuscation must be true or false"),
    }),
    "stream_options must be an object",
  ),
  n: optional(t.Literal(1), "n must be 1: Parley generates one choice"),
  // Fields that change nothing in the reply Parley gives.
  user: optional(t.String(), "user must be a string"),
  metadata: optional(t.Record(t.String(), t.String()), "metadata must map strings to strings"),
  service_tier: optional(t.String(), "service_tier must be a string"),
  prompt_cache_key: optional(t.String(), "prompt_cache_key must be a string"),
  safety_identifier: optional(t.String(), "safety_identifier must be a string"),
  prediction: optional(t.Object({ type: t.Literal("content") }), "prediction must be {type: \"content\", content}"),
  parallel_tool_calls: optional(t.Boolean(), "parallel_tool_calls must be true or false"),
  store: optional(t.Literal(false), "store must be false: Parley stores no completion (its native API stores conversations)"),
  modalities: optional(t.Array(t.Literal("text")), "modalities must be [\"text\"]: Parley answers with text only"),
  tool_choice: optional(t.Literal("none"), "tool_choice other than \"none\" is not supported: Parley does not call tools yet"),
  tools: optional(t.Array(t.Unknown(), { maxItems: 0 }), "tools are not supported: Parley does not call tools yet"),
  functions: optional(t.Array(t.Unknown(), { maxItems: 0 }), "functions are not supported: Parley does not call functions yet"),
  function_call: optional(t.Literal("none"), "function_call other than \"none\" is not supported: Parley does not call functions yet"),
  response_format: optional(RESPONSE_FORMAT, RESPONSE_FORMAT_RULE),
  logprobs: optional(t.Literal(false), "logprobs are not supported yet"),
  top_logprobs: unsupported("top_logprobs are not supported yet"),
  audio: unsupported("audio is not supported: Parley answers with text only"),
  reasoning_effort: unsupported("reasoning_effort is not supported: the model's chat template decides how it reasons"),
  verbosity: unsupported("verbosity is not supported"),
  web_search_options: unsupported("web_search_options are not supported: Parley has no network"),
}, {
  // A field OpenAI does not define (nor llama-server's top_k, min_p, repeat_penalty): refused, never
  // ignored, since it may be a sampling choice of another server that the reply would not honour.
  additionalProperties: t.Never({ error: "unknown field (param names it): Parley refuses a field it does not know rather than ignore it" }),
});

type CompletionRequest = typeof completionRequest.static;

type Message = CompletionRequest["messages"][number];

/** OpenAI's `developer` role is its newer name for `system`; an assistant's refusal is what it said. */
function toTurn({ role, content, reasoning_content }: Message): Turn {
  if (role !== "assistant" && Array.isArray(content) && content.some((part) => part.type === "refusal")) {
    throw new InvalidInput("messages", "only an assistant message may have a refusal part");
  }
  return {
    role: role === "developer" ? "system" : role,
    content: typeof content === "string" ? content : (content ?? []).map((part) => (part.type === "text" ? part.text : part.refusal)).join(""),
    ...(role === "assistant" && reasoning_content ? { reasoning: reasoning_content } : {}),
  };
}

function completionInput(body: CompletionRequest): Omit<CompletionInput, "signal" | "userId"> {
  const messages = body.messages.map(toTurn);
  const stop = typeof body.stop === "string" ? [body.stop] : (body.stop ?? undefined);
  // A lone surrogate is no text the model can be given (the native API refuses it the same way).
  if (![...messages.flatMap((turn) => [turn.content, turn.reasoning ?? ""]), ...(stop ?? [])].every((text) => text.isWellFormed())) {
    throw new InvalidInput("messages", "messages and stop must be valid Unicode text (one has a lone surrogate)");
  }
  const format = formatOf(body.response_format);
  return {
    messages,
    sampling: {
      // OpenAI's default.
      temperature: body.temperature ?? 1,
      ...samplingFieldsOf(body),
      // The engine's seeds are 32-bit; OpenAI's are any integer.
      seed: body.seed == null ? undefined : body.seed >>> 0,
    },
    maxTokens: body.max_completion_tokens ?? body.max_tokens ?? undefined,
    stop,
    ...(format ? { format } : {}),
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
