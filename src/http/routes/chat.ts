import { Elysia, t } from "elysia";
import type { ChatService, TurnResult } from "../../chat/service";
import type { Logger } from "../../log";
import type { Metrics } from "../../metrics";
import { InvalidInput } from "../../errors";
import type { auth } from "../auth";
import { CONVERSATION_ID, CONVERSATION_ID_RULE } from "../conversation-id";
import { errorBody, toDomainError } from "../errors";
import { jsonBody } from "../json-body";
import { chatReplyResponse, errorResponses } from "../openapi";
import { resultJson, startJson } from "../present";
import { finishRequest } from "../observe";
import type { RateLimiter } from "../rate-limit";
import { contextOf } from "../request-context";
import { event, PING, withHeartbeat } from "../sse";

const MAX_MESSAGE_CODE_POINTS = 16_000;
const MESSAGE_RULE = `message must be a string of 1 to ${MAX_MESSAGE_CODE_POINTS} characters`;

const chatRequest = t.Object({
  // UTF-16 length is at most twice the code points; the exact count is checked below.
  message: t.String({ maxLength: MAX_MESSAGE_CODE_POINTS * 2, error: MESSAGE_RULE }),
  conversation_id: t.String({ pattern: CONVERSATION_ID.source, error: CONVERSATION_ID_RULE }),
  stream: t.Optional(t.Boolean({ error: "stream must be true or false" })),
  temperature: t.Optional(t.Number({ minimum: 0, maximum: 1, error: "temperature must be a number from 0 to 1" })),
  max_tokens: t.Optional(t.Integer({ minimum: 1, maximum: 4096, error: "max_tokens must be an integer from 1 to 4096" })),
  seed: t.Optional(t.Integer({ minimum: 0, maximum: 2 ** 32 - 1, error: "seed must be an integer from 0 to 4294967295" })),
});

function checkMessage(message: string): void {
  let codePoints = 0;
  for (const _ of message) codePoints++;
  if (codePoints < 1 || codePoints > MAX_MESSAGE_CODE_POINTS || message.trim() === "") {
    throw new InvalidInput("message", `${MESSAGE_RULE}, not only whitespace`);
  }
}

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
          const failure = toDomainError(undefined, error);
          if (failure.kind === "internal") deps.log.error({ request_id: context.id, err: error }, "stream failed");
          yield event("error", errorBody(failure, context.id));
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
          "200": chatReplyResponse,
          ...errorResponses(
            "invalid_json",
            "unauthorized",
            "payload_too_large",
            "unsupported_media_type",
            "invalid_input",
            "rate_limited",
            "overloaded",
          ),
        },
      },
    },
  );
