/**
 * OpenAI's chat-completions protocol over the same engine, keys, limits, logs and metrics: a
 * second framing of the same turn. Stateless like OpenAI's: the client sends the history.
 * Every field is honoured or refused: a field that would change the reply and that Parley cannot
 * honour is `400` naming it, and so is a field OpenAI does not define (docs/API.md lists them).
 */
import { Elysia, t } from "elysia";
import type { CompletionInput } from "../../chat/completions";
import { InvalidInput } from "../../errors";
import type { Turn, TurnImage } from "../../llm/engine";
import { requireKey } from "../auth";
import { namingFields } from "../field-names";
import { jsonBody } from "../json-body";
import { toolRequestOf } from "../offered-tools";
import { chatCompletionFields } from "../openai/fields";
import { completionFraming, completionJson, newCompletion } from "../openai/present";
import { callsOf, chatTools, MESSAGE_TOOL_CALLS, TOOL_CHOICE, TOOLS } from "../openai/tools";
import { chatCompletionResponse, openAiErrorResponses, TURN_REFUSALS } from "../openapi";
import { RequestPictures } from "../pictures";
import { formatOf, RESPONSE_FORMAT, RESPONSE_FORMAT_RULE } from "../response-format";
import { integer, optional, SAMPLING_FIELDS, samplingFieldsOf, UNKNOWN_FIELD, unsupported } from "../sampling-fields";
import type { CompletionRouteDeps, RequestHooks } from "../turn-driver";

const MESSAGE_RULE =
  'each message needs a role (system, developer, user, assistant or tool) and content: a string or [{type: "text", text}] (a user\'s also [{type: "image_url", image_url: {url: a data URL, detail?}}], an assistant\'s [{type: "refusal", refusal}], or none beside tool_calls)';

const message = t.Object(
  {
    role: t.Union([t.Literal("system"), t.Literal("developer"), t.Literal("user"), t.Literal("assistant"), t.Literal("tool")], { error: MESSAGE_RULE }),
    content: optional(
      t.Union([
        t.String(),
        t.Array(
          t.Union([
            t.Object({ type: t.Literal("text"), text: t.String() }),
            t.Object({ type: t.Literal("refusal"), refusal: t.String() }),
            // `detail` changes nothing: the model sees a picture at its projector's one resolution.
            t.Object({
              type: t.Literal("image_url"),
              image_url: t.Object({ url: t.String(), detail: t.Optional(t.Union([t.Literal("auto"), t.Literal("low"), t.Literal("high")])) }),
            }),
          ]),
        ),
      ]),
      MESSAGE_RULE,
    ),
    // An assistant's thought as this API returned it: the chat template decides whether the model sees it.
    reasoning_content: optional(t.String(), "reasoning_content must be a string"),
    tool_calls: MESSAGE_TOOL_CALLS,
    // A tool message: the call it answers.
    tool_call_id: optional(t.String(), "tool_call_id must be a string"),
  },
  { error: MESSAGE_RULE },
);

const completionRequest = t.Object(
  {
    messages: t.Array(message, { minItems: 1, error: `messages must be a non-empty array; ${MESSAGE_RULE}` }),
    model: optional(t.String(), "model must be a string"),
    temperature: optional(t.Number({ minimum: 0, maximum: 2 }), "temperature must be a number from 0 to 2"),
    ...SAMPLING_FIELDS,
    max_tokens: optional(integer({ minimum: 1 }), "max_tokens must be a positive integer"),
    max_completion_tokens: optional(integer({ minimum: 1 }), "max_completion_tokens must be a positive integer"),
    seed: optional(integer(), "seed must be an integer"),
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
    prediction: optional(t.Object({ type: t.Literal("content") }), 'prediction must be {type: "content", content}'),
    tools: TOOLS,
    tool_choice: TOOL_CHOICE,
    parallel_tool_calls: optional(t.Boolean(), "parallel_tool_calls must be true or false"),
    store: optional(t.Literal(false), "store must be false: Parley stores no completion (its native API stores conversations)"),
    modalities: optional(t.Array(t.Literal("text")), 'modalities must be ["text"]: Parley answers with text only'),
    functions: optional(t.Array(t.Unknown(), { maxItems: 0 }), "functions are OpenAI's former tools: send tools instead"),
    function_call: optional(t.Literal("none"), "function_call is OpenAI's former tool_choice: send tool_choice instead"),
    response_format: optional(RESPONSE_FORMAT, RESPONSE_FORMAT_RULE),
    logprobs: optional(t.Boolean(), "logprobs must be true or false"),
    top_logprobs: optional(integer({ minimum: 0, maximum: 20 }), "top_logprobs must be an integer from 0 to 20"),
    audio: unsupported("audio is not supported: Parley answers with text only"),
    reasoning_effort: unsupported("reasoning_effort is not supported: the model's chat template decides how it reasons"),
    verbosity: unsupported("verbosity is not supported"),
    web_search_options: unsupported("web_search_options are not supported: Parley has no network"),
    // A field OpenAI does not define (nor llama-server's top_k, min_p, repeat_penalty) is refused.
  },
  UNKNOWN_FIELD,
);

type CompletionRequest = typeof completionRequest.static;

type Message = CompletionRequest["messages"][number];

/**
 * The history as turns. OpenAI's `developer` role is its newer name for `system`; an assistant's
 * refusal is what it said; a tool's result must answer a call an earlier assistant message made.
 */
async function toTurns(messages: readonly Message[], pictures: RequestPictures): Promise<Turn[]> {
  const calls = new Map<string, string>();
  const turns: Turn[] = [];
  for (const [i, message] of messages.entries()) turns.push(await toTurn(message, `messages[${i}]`, calls, pictures));
  return turns;
}

/** One message as a turn; a tool's message answers one of `calls`, an assistant's adds its own. */
async function toTurn(
  { role, content, reasoning_content, tool_calls, tool_call_id }: Message,
  at: string,
  calls: Map<string, string>,
  pictures: RequestPictures,
): Promise<Turn> {
  if (role !== "assistant" && Array.isArray(content) && content.some((part) => part.type === "refusal")) {
    throw new InvalidInput(at, "only an assistant message may have a refusal part");
  }
  if (role !== "assistant" && tool_calls != null) throw new InvalidInput(`${at}.tool_calls`, "only an assistant message may call tools");
  if (role !== "tool" && tool_call_id != null) throw new InvalidInput(`${at}.tool_call_id`, "only a tool message answers a call");
  if (role !== "assistant" && content === undefined) throw new InvalidInput(`${at}.content`, MESSAGE_RULE);
  const { text, images } = await contentOf(content ?? [], at, role === "user", pictures);
  if (role === "tool") {
    const name = calls.get(tool_call_id ?? "");
    if (name === undefined)
      throw new InvalidInput(
        `${at}.tool_call_id`,
        `a tool message must answer a call of an earlier assistant message (${JSON.stringify(tool_call_id ?? null)} answers none)`,
      );
    return { role, content: text, toolCallId: tool_call_id!, name };
  }
  if (role !== "assistant") return { role: role === "developer" ? "system" : role, content: text, ...(images.length > 0 ? { images } : {}) };
  const toolCalls = callsOf(tool_calls ?? [], at);
  for (const call of toolCalls) calls.set(call.id, call.name);
  return { role, content: text, ...(reasoning_content ? { reasoning: reasoning_content } : {}), ...(toolCalls.length > 0 ? { toolCalls } : {}) };
}

/** A message's text, its parts' texts in order, and a user's pictures where their parts stand in it. */
async function contentOf(
  content: NonNullable<Message["content"]>,
  at: string,
  user: boolean,
  pictures: RequestPictures,
): Promise<{ text: string; images: TurnImage[] }> {
  if (typeof content === "string") return { text: content, images: [] };
  let text = "";
  const images: TurnImage[] = [];
  for (const [i, part] of content.entries()) {
    if (part.type === "image_url") {
      if (!user) throw new InvalidInput(`${at}.content[${i}]`, "only a user message may have a picture");
      images.push({ data: await pictures.fromUrl(`${at}.content[${i}].image_url.url`, part.image_url.url), at: text.length });
    } else text += part.type === "text" ? part.text : part.refusal;
  }
  return { text, images };
}

async function completionInput(body: CompletionRequest, pictures: RequestPictures): Promise<Omit<CompletionInput, "signal" | "userId">> {
  const messages = await toTurns(body.messages, pictures);
  const stop = typeof body.stop === "string" ? [body.stop] : (body.stop ?? undefined);
  // A lone surrogate is no text the model can be given (the native API refuses it the same way).
  if (![...messages.flatMap((turn) => [turn.content, turn.reasoning ?? ""]), ...(stop ?? [])].every((text) => text.isWellFormed())) {
    throw new InvalidInput("messages", "messages and stop must be valid Unicode text (one has a lone surrogate)");
  }
  const format = formatOf(body.response_format);
  const tools = toolRequestOf(chatTools(body));
  if (body.top_logprobs != null && body.logprobs !== true) throw new InvalidInput("top_logprobs", "top_logprobs needs logprobs: true");
  // As OpenAI answers it: options of a stream that was not asked for.
  if (body.stream_options != null && body.stream !== true) throw new InvalidInput("stream_options", "stream_options needs stream: true");
  return {
    messages,
    ...(body.model != null ? { model: body.model } : {}),
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
    ...(tools ? { tools } : {}),
    ...(body.logprobs === true ? { logprobs: body.top_logprobs ?? 0 } : {}),
  };
}

export const openAiRoutes = (deps: CompletionRouteDeps) =>
  new Elysia({ name: "parley/routes/openai" })
    .onBeforeHandle(namingFields(chatCompletionFields))
    .use(requireKey)
    .post(
      "/v1/chat/completions",
      async function* ({ body, principal, request, server, set }) {
        const pictures = new RequestPictures(deps.body.pictureHosts);
        const input = await completionInput(body, pictures);
        pictures.nameIn(request);
        const turn = (hooks: RequestHooks) => deps.completions.complete({ ...input, userId: principal.userId, ...hooks });
        const identity = newCompletion();
        if (body.stream !== true) {
          const result = await deps.turns.complete({ request, set }, turn);
          return result && completionJson(identity, result);
        }
        const framing = completionFraming(identity, body.stream_options?.include_usage === true);
        yield* deps.turns.stream({ request, set, server, keyId: principal.keyId }, turn, framing);
      },
      {
        auth: "key",
        body: completionRequest,
        parse: jsonBody(deps.body, { pictures: true }),
        detail: {
          summary: "OpenAI-compatible chat completion (stateless; JSON, or Server-Sent Events with stream: true)",
          tags: ["OpenAI-compatible"],
          responses: {
            "200": chatCompletionResponse,
            ...openAiErrorResponses(...TURN_REFUSALS, "quota_exceeded"),
          },
        },
      },
    );
