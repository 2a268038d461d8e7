import { Elysia, t } from "elysia";
import type { ChatService, TurnResult, TurnStart } from "../../chat/service";
import { invalidRequest } from "../../errors";
import { requireKey } from "../auth";
import { errorBody } from "../errors";
import { jsonBody } from "../json-body";
import { chatReplySchema, errorResponses, SSE_DESCRIPTION } from "../openapi";
import { CONVERSATION_ID } from "../listing-query";
import { messageJson } from "../present";
import { event } from "../sse";
import type { Framing, TurnDriver } from "../turn-driver";

const MAX_MESSAGE_CODE_POINTS = 16_000;

const chatRequest = t.Object({
  // UTF-16 length is at most twice the code points; the exact count is checked below.
  message: t.String({ maxLength: MAX_MESSAGE_CODE_POINTS * 2, error: "message must be a string of 1 to 16000 characters" }),
  conversation_id: t.String({
    pattern: CONVERSATION_ID.source,
    error: "conversation_id must be 1 to 128 characters of A-Z a-z 0-9 . _ : - not starting with :",
  }),
  stream: t.Optional(t.Boolean({ error: "stream must be true or false" })),
  temperature: t.Optional(t.Number({ minimum: 0, maximum: 1, error: "temperature must be a number from 0 to 1" })),
  max_tokens: t.Optional(t.Integer({ minimum: 1, maximum: 4096, error: "max_tokens must be an integer from 1 to 4096" })),
  seed: t.Optional(t.Integer({ minimum: 0, maximum: 2 ** 32 - 1, error: "seed must be an integer from 0 to 4294967295" })),
});

function checkMessage(message: string): void {
  let codePoints = 0;
  for (const _ of message) codePoints++;
  if (codePoints < 1 || codePoints > MAX_MESSAGE_CODE_POINTS || message.trim() === "") {
    throw invalidRequest("message", "message must be a string of 1 to 16000 characters, not only whitespace");
  }
}

const startJson = (start: TurnStart) => ({
  conversation_id: start.conversationId,
  new_conversation: start.newConversation,
  user_message: messageJson(start.userMessage),
  model: start.model,
});

const resultJson = (result: TurnResult) => ({
  conversation_id: result.conversationId,
  new_conversation: result.newConversation,
  message: messageJson(result.message),
  user_message: messageJson(result.userMessage),
  usage: result.usage,
  model: result.model,
});

/** The native API's stream: `start`, `delta`s, then `done` or `error`. */
const nativeFraming: Framing<TurnStart, TurnResult> = {
  start: (start) => [event("start", startJson(start))],
  delta: (content) => event("delta", { content }),
  done: (result) => [event("done", resultJson(result))],
  error: (error, requestId) => [event("error", errorBody(error, requestId))],
};

export interface ChatRouteDeps {
  chat: ChatService;
  turns: TurnDriver;
  bodyLimitBytes: number;
}

export const chatRoutes = (deps: ChatRouteDeps) =>
  new Elysia({ name: "parley/routes/chat" }).use(requireKey).post(
    "/api/v1.0/chat",
    async function* ({ body, principal, request, server, set }) {
      checkMessage(body.message);
      const turn = (signal: AbortSignal) =>
        deps.chat.turn({
          userId: principal.userId,
          conversationId: body.conversation_id,
          message: body.message,
          temperature: body.temperature ?? 0.7,
          maxTokens: body.max_tokens ?? 512,
          seed: body.seed,
          signal,
        });
      if (body.stream !== true) {
        const result = await deps.turns.complete(request, turn);
        return result && resultJson(result);
      }
      yield* deps.turns.stream({ request, set, server, keyId: principal.keyId }, turn, nativeFraming);
    },
    {
      auth: "key",
      body: chatRequest,
      parse: jsonBody(deps.bodyLimitBytes),
      detail: {
        summary: "Send a message; get the reply (JSON, or Server-Sent Events with stream: true)",
        responses: {
          "200": {
            description: `The stored reply. ${SSE_DESCRIPTION}`,
            content: {
              "application/json": { schema: chatReplySchema },
              "text/event-stream": { schema: { type: "string", description: SSE_DESCRIPTION } },
            },
          },
          ...errorResponses(400, 401, 413, 415, 422, 429, 503),
        },
      } as never,
    },
  );
