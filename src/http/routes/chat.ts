import { Elysia, t } from "elysia";
import type { ChatService, TurnResult, TurnStart } from "../../chat/service";
import { InvalidInput } from "../../errors";
import { requireKey } from "../auth";
import { CONVERSATION_ID, CONVERSATION_ID_RULE } from "../conversation-id";
import { errorBody } from "../errors";
import { namingFields } from "../field-names";
import { type BodyLimits, jsonBody } from "../json-body";
import { NATIVE_TOOL_FIELDS, nativeServerTools, toolEvents } from "../native-tools";
import { chatReplyResponse, errorResponses } from "../openapi";
import { RequestPictures } from "../pictures";
import { nativeFields, resultJson, startJson } from "../present";
import { contextOf } from "../request-context";
import { formatOf, RESPONSE_FORMAT, RESPONSE_FORMAT_RULE } from "../response-format";
import { integer, SAMPLING_FIELDS, samplingFieldsOf } from "../sampling-fields";
import { event } from "../sse";
import type { Framing, RequestHooks, TurnDriver } from "../turn-driver";

const MAX_MESSAGE_CODE_POINTS = 16_000;
const MESSAGE_RULE = `message must be a string of 1 to ${MAX_MESSAGE_CODE_POINTS} characters`;
const MAX_IMAGES = 8;
const IMAGES_RULE = `images must be an array of up to ${MAX_IMAGES} pictures, each its file (PNG, JPEG, GIF or BMP) in base64`;

const chatRequest = t.Object({
  // UTF-16 length is at most twice the code points; the exact count is checked below.
  message: t.String({ maxLength: MAX_MESSAGE_CODE_POINTS * 2, error: MESSAGE_RULE }),
  conversation_id: t.String({ pattern: CONVERSATION_ID.source, error: CONVERSATION_ID_RULE }),
  stream: t.Optional(t.Boolean({ error: "stream must be true or false" })),
  temperature: t.Optional(t.Number({ minimum: 0, maximum: 1, error: "temperature must be a number from 0 to 1" })),
  max_tokens: t.Optional(integer({ minimum: 1, maximum: 4096, error: "max_tokens must be an integer from 1 to 4096" })),
  seed: t.Optional(integer({ minimum: 0, maximum: 2 ** 32 - 1, error: "seed must be an integer from 0 to 4294967295" })),
  model: t.Optional(t.String({ minLength: 1, maxLength: 256, error: "model must be a model's id (GET /v1/models lists them)" })),
  response_format: t.Optional(t.Union([RESPONSE_FORMAT, t.Null()], { error: RESPONSE_FORMAT_RULE })),
  images: t.Optional(t.Array(t.String(), { maxItems: MAX_IMAGES, error: IMAGES_RULE })),
  ...NATIVE_TOOL_FIELDS,
  ...SAMPLING_FIELDS,
});

/**
 * A load balancer routes by `X-Conversation-Id` when a client sends it (deploy/haproxy.cfg): it
 * must name the body's conversation, or the turn would run on a node without its cache.
 */
function checkConversationHeader(header: string | null, conversationId: string): void {
  if (header !== null && header !== conversationId) {
    throw new InvalidInput("conversation_id", "the X-Conversation-Id header must equal the body's conversation_id");
  }
}

function checkMessage(message: string): void {
  // JSON may carry a lone surrogate (`"\ud800"`), which UTF-8 storage would turn into U+FFFD:
  // the stored text must be what the user sent.
  if (!message.isWellFormed()) throw new InvalidInput("message", "message must be valid Unicode text (it has a lone surrogate)");
  let codePoints = 0;
  for (const _ of message) codePoints++;
  if (codePoints < 1 || codePoints > MAX_MESSAGE_CODE_POINTS || message.trim() === "") {
    throw new InvalidInput("message", `${MESSAGE_RULE}, not only whitespace`);
  }
}

/**
 * The native API's stream: `start`, a reasoning model's `reasoning`, `delta`s (with server tools,
 * each call's `tool_call` and `tool_result`), then `done` or `error`.
 */
const nativeFraming = (toolStem: string | undefined): Framing<TurnStart, TurnResult> => ({
  start: (start) => [event("start", startJson(start))],
  reasoning: (content) => [event("reasoning", { content })],
  delta: (content) => [event("delta", { content })],
  serverTool: toolEvents(toolStem),
  done: (result) => [event("done", resultJson(result))],
  error: (error, requestId) => [event("error", errorBody(error, requestId))],
});

export interface ChatRouteDeps {
  chat: ChatService;
  turns: TurnDriver;
  body: BodyLimits;
}

export const chatRoutes = (deps: ChatRouteDeps) =>
  new Elysia({ name: "parley/routes/chat" })
    .use(requireKey)
    .onBeforeHandle(namingFields(nativeFields))
    .post(
      "/api/v1.0/chat",
      async function* ({ body, principal, request, server, set }) {
        checkConversationHeader(request.headers.get("x-conversation-id"), body.conversation_id);
        contextOf(request).conversationId = body.conversation_id;
        checkMessage(body.message);
        const serverTools = nativeServerTools(body, { userName: principal.userName, role: principal.role });
        const turn = (hooks: RequestHooks) =>
          deps.chat.turn({
            userId: principal.userId,
            conversationId: body.conversation_id,
            message: body.message,
            ...new RequestPictures().after(body.message, body.images, "images"),
            sampling: { temperature: body.temperature ?? 0.7, seed: body.seed, ...samplingFieldsOf(body) },
            maxTokens: body.max_tokens ?? 512,
            format: formatOf(body.response_format),
            ...(body.model !== undefined ? { model: body.model } : {}),
            ...(serverTools ? { serverTools } : {}),
            ...hooks,
          });
        if (body.stream !== true) {
          const result = await deps.turns.complete({ request, set }, turn);
          return result && resultJson(result);
        }
        yield* deps.turns.stream({ request, set, server, keyId: principal.keyId }, turn, nativeFraming(serverTools?.stem));
      },
      {
        auth: "key",
        body: chatRequest,
        parse: jsonBody(deps.body, { pictures: true }),
        detail: {
          summary: "Send a message; get the reply (JSON, or Server-Sent Events with stream: true)",
          responses: {
            "200": chatReplyResponse,
            ...errorResponses(
              "invalid_json",
              "unauthorized",
              "payload_too_large",
              "unsupported_media_type",
              "invalid_input",
              "model_not_found",
              "dependency_failed",
              "rate_limited",
              "quota_exceeded",
              "overloaded",
            ),
          },
        },
      },
    );
