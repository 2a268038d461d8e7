/**
 * OpenAI's legacy completions (`POST /v1/completions`): a prompt continued as written, no chat
 * template, over the same turns, keys, quotas, prompt cache (per user), logs and metrics as chat
 * completions. With `suffix`, the completion fills in between the prompt and it, for a model with
 * fill-in-the-middle tokens (as llama-server's `/infill` would with the prompt before the cursor).
 * Every field is honoured or refused by name: `best_of` and `n` above 1, several prompts, token-id
 * prompts, and `echo` with `logprobs` are `400` (docs/API.md).
 */
import { Elysia, t } from "elysia";
import type { CompletionInput } from "../../chat/completions";
import { InvalidInput } from "../../errors";
import { requireKey } from "../auth";
import { namingFields } from "../field-names";
import { jsonBody } from "../json-body";
import { textCompletionFields } from "../openai/fields";
import { newCompletion, textCompletionFraming, textCompletionJson } from "../openai/present";
import { openAiErrorResponses, TURN_REFUSALS, textCompletionResponse } from "../openapi";
import { integer, optional, SAMPLING_FIELDS, samplingFieldsOf, UNKNOWN_FIELD } from "../sampling-fields";
import type { CompletionRouteDeps, RequestHooks } from "../turn-driver";

/** OpenAI's default for this API: a legacy completion is 16 tokens unless asked for more. */
const DEFAULT_MAX_TOKENS = 16;

const PROMPT_RULE = "prompt must be a non-empty string, or an array of one (Parley completes one prompt a request)";

const textCompletionRequest = t.Object(
  {
    prompt: t.Union([t.String({ minLength: 1 }), t.Array(t.String({ minLength: 1 }), { minItems: 1, maxItems: 1 })], { error: PROMPT_RULE }),
    model: optional(t.String(), "model must be a string"),
    max_tokens: optional(integer({ minimum: 1 }), "max_tokens must be a positive integer"),
    temperature: optional(t.Number({ minimum: 0, maximum: 2 }), "temperature must be a number from 0 to 2"),
    ...SAMPLING_FIELDS,
    seed: optional(integer(), "seed must be an integer"),
    stop: optional(
      t.Union([t.String({ minLength: 1 }), t.Array(t.String({ minLength: 1 }), { maxItems: 4 })]),
      "stop must be a non-empty string or an array of up to 4",
    ),
    stream: optional(t.Boolean(), "stream must be true or false"),
    stream_options: optional(t.Object({ include_usage: optional(t.Boolean(), "include_usage must be true or false") }), "stream_options must be an object"),
    logprobs: optional(integer({ minimum: 0, maximum: 5 }), "logprobs must be an integer from 0 to 5: the most likely tokens given beside each"),
    echo: optional(t.Boolean(), "echo must be true or false"),
    n: optional(t.Literal(1), "n must be 1: Parley completes one choice a request"),
    best_of: optional(t.Literal(1), "best_of must be 1: Parley generates no choices to pick from"),
    suffix: optional(t.String(), "suffix must be a string: the text the completion goes before"),
    // Changes nothing in the text: OpenAI's end-user identifier.
    user: optional(t.String(), "user must be a string"),
  },
  UNKNOWN_FIELD,
);
type TextCompletionRequest = typeof textCompletionRequest.static;

function textInput(body: TextCompletionRequest, prompt: string): Omit<CompletionInput, "signal" | "userId"> {
  const stop = typeof body.stop === "string" ? [body.stop] : (body.stop ?? undefined);
  const suffix = body.suffix ?? undefined;
  if (![prompt, suffix ?? "", ...(stop ?? [])].every((text) => text.isWellFormed()))
    throw new InvalidInput("prompt", "prompt, suffix and stop must be valid Unicode text (one has a lone surrogate)");
  if (body.echo === true && body.logprobs != null)
    throw new InvalidInput("echo", "echo with logprobs is not supported: Parley tells no prompt token's log-probability");
  if (body.stream_options != null && body.stream !== true) throw new InvalidInput("stream_options", "stream_options needs stream: true");
  return {
    messages: [],
    ...(suffix !== undefined ? { infill: { before: prompt, after: suffix, start: "", files: [] } } : { raw: prompt }),
    ...(body.model != null ? { model: body.model } : {}),
    sampling: { temperature: body.temperature ?? 1, ...samplingFieldsOf(body), seed: body.seed == null ? undefined : body.seed >>> 0 },
    maxTokens: body.max_tokens ?? DEFAULT_MAX_TOKENS,
    stop,
    ...(body.logprobs != null ? { logprobs: body.logprobs } : {}),
  };
}

export const textCompletionRoutes = (deps: CompletionRouteDeps) =>
  new Elysia({ name: "parley/routes/text-completions" })
    .onBeforeHandle(namingFields(textCompletionFields))
    .use(requireKey)
    .post(
      "/v1/completions",
      async function* ({ body, principal, request, server, set }) {
        const prompt = typeof body.prompt === "string" ? body.prompt : body.prompt[0]!;
        const input = textInput(body, prompt);
        const turn = (hooks: RequestHooks) => deps.completions.complete({ ...input, userId: principal.userId, ...hooks });
        const identity = newCompletion("cmpl");
        const options = { echoed: body.echo === true ? prompt : "", logprobs: body.logprobs != null };
        if (body.stream !== true) {
          const result = await deps.turns.complete({ request, set }, turn);
          return result && textCompletionJson(identity, result, options);
        }
        yield* deps.turns.stream(
          { request, set, server, keyId: principal.keyId },
          turn,
          textCompletionFraming(identity, body.stream_options?.include_usage === true, options),
        );
      },
      {
        auth: "key",
        body: textCompletionRequest,
        parse: jsonBody(deps.body),
        detail: {
          summary: "OpenAI-compatible legacy completion: the prompt continued as written, no chat template (JSON, or Server-Sent Events with stream: true)",
          tags: ["OpenAI-compatible"],
          responses: { "200": textCompletionResponse, ...openAiErrorResponses(...TURN_REFUSALS, "quota_exceeded") },
        },
      },
    );
