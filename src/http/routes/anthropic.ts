/**
 * Anthropic's Messages API over the same runner, keys, limits, quotas, logs and metrics: a third
 * framing of the same turn, stateless like OpenAI's (the client sends the history). Its clients'
 * `x-api-key` is taken as the key (auth.ts), `anthropic-version` is accepted, and its errors take
 * Anthropic's shape (errors.ts). Every field is honoured or refused.
 */
import { Elysia } from "elysia";
import type { CompletionInput, CompletionService } from "../../chat/completions";
import { InvalidInput } from "../../errors";
import type { Turn } from "../../llm/engine";
import { requireKey } from "../auth";
import { AnthropicErrorBody, AnthropicMessage, CountTokensRequest, MessagesRequest, TokenCount } from "../anthropic/contract";
import { messageJson, messagesFraming, newMessageId } from "../anthropic/present";
import { type BodyLimits, jsonBody } from "../json-body";
import type { RequestHooks, TurnDriver } from "../turn-driver";

const TAGS = ["Anthropic-compatible"];

type Blocks = MessagesRequest["system"];

const textOf = (content: string | NonNullable<Blocks>) => (typeof content === "string" ? content : content.map((block) => block.text).join(""));

/** The history as turns: the system prompt first, then the messages, whose text must be valid Unicode. */
function turnsOf(request: Pick<MessagesRequest, "system" | "messages">): Turn[] {
  const turns: Turn[] = [
    ...(request.system != null ? [{ role: "system" as const, content: textOf(request.system) }] : []),
    ...request.messages.map(({ role, content }) => ({ role, content: textOf(content) })),
  ];
  // A lone surrogate is no text the model can be given (the other APIs refuse it the same way).
  if (!turns.every((turn) => turn.content.isWellFormed())) throw new InvalidInput("messages", "messages and system must be valid Unicode text (one has a lone surrogate)");
  return turns;
}

function completionInput(body: MessagesRequest): Omit<CompletionInput, "signal" | "userId"> {
  const stop = body.stop_sequences ?? undefined;
  if (stop && !stop.every((text) => text.isWellFormed())) throw new InvalidInput("stop_sequences", "stop_sequences must be valid Unicode text");
  return {
    messages: turnsOf(body),
    model: body.model,
    sampling: {
      // Anthropic's default.
      temperature: body.temperature ?? 1,
      ...(body.top_p != null ? { topP: body.top_p } : {}),
      ...(body.top_k != null ? { topK: body.top_k } : {}),
    },
    maxTokens: body.max_tokens,
    ...(stop && stop.length > 0 ? { stop } : {}),
  };
}

const jsonResponse = (description: string, schema: object) => ({ description, content: { "application/json": { schema } } });
const errorResponse = { description: "Anthropic's error shape: invalid_request_error (400, 413 request_too_large), authentication_error (401), permission_error (403), not_found_error (404), rate_limit_error (429), api_error (500), overloaded_error (503)", content: { "application/json": { schema: AnthropicErrorBody } } };

export interface AnthropicRouteDeps {
  completions: CompletionService;
  turns: TurnDriver;
  body: BodyLimits;
}

export const anthropicRoutes = (deps: AnthropicRouteDeps) =>
  new Elysia({ name: "parley/routes/anthropic" })
    .use(requireKey)
    .post(
      "/v1/messages",
      async function* ({ body, principal, request, server, set }) {
        const input = completionInput(body);
        const turn = (hooks: RequestHooks) => deps.completions.complete({ ...input, userId: principal.userId, ...hooks });
        const id = newMessageId();
        if (body.stream !== true) {
          const result = await deps.turns.complete({ request, set }, turn);
          return result && messageJson(id, result);
        }
        yield* deps.turns.stream({ request, set, server, keyId: principal.keyId }, turn, messagesFraming(id));
      },
      {
        auth: "key",
        body: MessagesRequest,
        parse: jsonBody(deps.body),
        detail: {
          summary: "Anthropic-compatible Messages: the reply as a message (JSON, or Anthropic's named events with stream: true)",
          tags: TAGS,
          responses: { "200": jsonResponse("The message", AnthropicMessage), "4XX": errorResponse, "5XX": errorResponse },
        },
      },
    )
    .post(
      "/v1/messages/count_tokens",
      async ({ body, principal, request }) => ({ input_tokens: await deps.completions.countTokens({ userId: principal.userId, model: body.model, messages: turnsOf(body), signal: request.signal }) }),
      {
        auth: "key",
        body: CountTokensRequest,
        parse: jsonBody(deps.body),
        detail: {
          summary: "Anthropic-compatible: the prompt's tokens with the model's chat template, without generating",
          tags: TAGS,
          responses: { "200": jsonResponse("The count", TokenCount), "4XX": errorResponse, "5XX": errorResponse },
        },
      },
    );
