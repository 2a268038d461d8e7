import { Elysia, t } from "elysia";
import type { ChatService, TurnResult, TurnStart } from "../../chat/service";
import type { Logger } from "../../log";
import type { Metrics } from "../../metrics";
import { invalidRequest } from "../../errors";
import type { auth } from "../auth";
import { errorBody, toAppError } from "../errors";
import { jsonBody } from "../json-body";
import { chatReplySchema, errorResponses, SSE_DESCRIPTION } from "../openapi";
import { CONVERSATION_ID } from "../listing-query";
import { messageJson } from "../present";
import { finishRequest } from "../observe";
import type { RateLimiter } from "../rate-limit";
import { contextOf } from "../request-context";
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
  limiter: RateLimiter;
  metrics: Metrics;
  log: Logger;
  bodyLimitBytes: number;
  heartbeatMs: number;
}

/** Times one reply's tokens for the metrics, from the events the route relays anyway. */
function meter(metrics: Metrics, request: Request) {
  const arrived = contextOf(request).startedAt;
  let firstTokenAt: number | undefined;
  return {
    token() {
      if (firstTokenAt !== undefined) return;
      firstTokenAt = performance.now();
      metrics.timeToFirstToken.observe((firstTokenAt - arrived) / 1000);
    },
    done(result: TurnResult) {
      const { completion_tokens, prompt_tokens, cached_tokens } = result.usage;
      contextOf(request).tokens = completion_tokens;
      metrics.tokensGenerated.inc(completion_tokens);
      metrics.promptTokens.inc({ source: "cached" }, cached_tokens);
      metrics.promptTokens.inc({ source: "evaluated" }, prompt_tokens - cached_tokens);
      const seconds = firstTokenAt === undefined ? 0 : (performance.now() - firstTokenAt) / 1000;
      if (completion_tokens > 1 && seconds > 0) metrics.tokensPerSecond.observe((completion_tokens - 1) / seconds);
    },
  };
}

export const chatRoutes = (deps: ChatRouteDeps) =>
  new Elysia({ name: "parley/routes/chat" }).use(deps.auth).post(
    "/api/v1.0/chat",
    async function* ({ body, principal, request, server, set }) {
      checkMessage(body.message);
      const closeStream = body.stream === true ? deps.limiter.openStream(principal.keyId) : undefined;
      const metered = meter(deps.metrics, request);
      const turn = deps.chat.turn({
        userId: principal.userId,
        conversationId: body.conversation_id,
        message: body.message,
        temperature: body.temperature ?? 0.7,
        maxTokens: body.max_tokens ?? 512,
        seed: body.seed,
        signal: request.signal,
      });

      if (closeStream === undefined) {
        for (;;) {
          const step = await turn.next();
          if (!step.done) {
            if (step.value.type === "delta") metered.token();
            continue;
          }
          if (!step.value) return;
          metered.done(step.value);
          return resultJson(step.value);
        }
      }

      const context = contextOf(request);
      try {
        // Everything up to the stored user message happens before the first byte, so a refusal
        // (overloaded, model loading) is still an ordinary JSON error.
        const first = await turn.next();
        if (first.done || first.value.type !== "start") return;
        set.headers["content-type"] = "text/event-stream";
        set.headers["cache-control"] = "no-cache";
        context.streaming = true;
        // Heartbeats keep the stream alive; Bun's idle timeout must not cut a long queue wait.
        server?.timeout(request, 0);
        yield event("start", startJson(first.value));
        try {
          const events = withHeartbeat(turn, deps.heartbeatMs, request.signal);
          for (;;) {
            const step = await events.next();
            if (step.done) {
              if (step.value) {
                metered.done(step.value);
                yield event("done", resultJson(step.value));
              }
              return;
            }
            const item = step.value;
            if ("toSSE" in item) yield PING;
            else if (item.type === "delta") {
              metered.token();
              yield event("delta", { content: item.content });
            }
          }
        } catch (error) {
          // Past the first byte Elysia would only log a throw; the client gets an error event.
          const appError = toAppError(undefined, error);
          if (appError.code === "internal") deps.log.error({ request_id: context.id, err: error }, "stream failed");
          yield event("error", errorBody(appError, context.id));
        }
      } finally {
        closeStream();
        finishRequest(request);
      }
    },
    {
      body: chatRequest,
      parse: jsonBody(deps.bodyLimitBytes),
      detail: {
        summary: "Send a message; get the reply (JSON, or Server-Sent Events with stream: true)",
        security: [{ bearer: [] }],
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
