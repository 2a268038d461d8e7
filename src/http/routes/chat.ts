import { Elysia, t } from "elysia";
import type { ChatService, TurnResult, TurnStart } from "../../chat/service";
import { invalidRequest } from "../../errors";
import type { auth } from "../auth";
import { errorBody, toAppError } from "../errors";
import { jsonBody } from "../json-body";
import { CONVERSATION_ID } from "../listing-query";
import { messageJson } from "../present";
import { requestIdOf } from "../request-id";
import { event, PING, withHeartbeat } from "../sse";

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

export interface ChatRouteDeps {
  chat: ChatService;
  auth: ReturnType<typeof auth>;
  bodyLimitBytes: number;
  heartbeatMs: number;
}

export const chatRoutes = (deps: ChatRouteDeps) =>
  new Elysia({ name: "parley/routes/chat" }).use(deps.auth).post(
    "/api/v1.0/chat",
    async function* ({ body, principal, request, server, set }) {
      checkMessage(body.message);
      const turn = deps.chat.turn({
        userId: principal.userId,
        conversationId: body.conversation_id,
        message: body.message,
        temperature: body.temperature ?? 0.7,
        maxTokens: body.max_tokens ?? 512,
        seed: body.seed,
        signal: request.signal,
      });

      if (body.stream !== true) {
        for (;;) {
          const step = await turn.next();
          if (step.done) return step.value ? resultJson(step.value) : undefined;
        }
      }

      // Everything up to the stored user message happens before the first byte, so a refusal
      // (overloaded, model loading) is still an ordinary JSON error.
      const first = await turn.next();
      if (first.done || first.value.type !== "start") return;
      set.headers["content-type"] = "text/event-stream";
      set.headers["cache-control"] = "no-cache";
      // Heartbeats keep the stream alive; Bun's idle timeout must not cut a long queue wait.
      server?.timeout(request, 0);
      yield event("start", startJson(first.value));
      try {
        const events = withHeartbeat(turn, deps.heartbeatMs, request.signal);
        for (;;) {
          const step = await events.next();
          if (step.done) {
            if (step.value) yield event("done", resultJson(step.value));
            return;
          }
          const item = step.value;
          if ("toSSE" in item) yield PING;
          else if (item.type === "delta") yield event("delta", { content: item.content });
        }
      } catch (error) {
        // Past the first byte Elysia would only log a throw; the client gets an error event.
        const appError = toAppError(undefined, error);
        if (appError.code === "internal") console.error(JSON.stringify({ level: "error", request_id: requestIdOf(request), msg: "stream failed", err: String(error) }));
        yield event("error", errorBody(appError, requestIdOf(request)));
      }
    },
    { body: chatRequest, parse: jsonBody(deps.bodyLimitBytes) },
  );
