/**
 * OpenAPI fragments that Elysia cannot derive from the route schemas: the error body, the
 * responses each route can give, and the SSE stream. Documented through `detail`, never as
 * response schemas, so responses are not re-validated at run time.
 */
import type { ErrorCode } from "../errors";

const STATUS: Record<number, { code: ErrorCode; description: string }> = {
  400: { code: "invalid_json", description: "The body is not valid JSON" },
  401: { code: "unauthorized", description: "Missing, malformed, unknown or revoked key (WWW-Authenticate: Bearer)" },
  403: { code: "forbidden", description: "A user key asked for another user's messages" },
  404: { code: "not_found", description: "Unknown path" },
  405: { code: "method_not_allowed", description: "Known path, wrong method (see Allow)" },
  413: { code: "payload_too_large", description: "Body over the size limit" },
  415: { code: "unsupported_media_type", description: "Body is not application/json" },
  422: { code: "invalid_request", description: "A field or parameter is missing, of the wrong type or out of range; param names it" },
  429: { code: "rate_limited", description: "Per-key rate limit or stream cap hit (Retry-After)" },
  503: { code: "overloaded", description: "Model loading, shutting down, or queue full (Retry-After)" },
  500: { code: "internal", description: "Unexpected failure; details only in the server log" },
};

export const errorSchema = {
  type: "object",
  required: ["error"],
  properties: {
    error: {
      type: "object",
      required: ["code", "message", "request_id"],
      properties: {
        code: { type: "string", enum: [...new Set(Object.values(STATUS).map((s) => s.code))] },
        message: { type: "string" },
        param: { type: "string", description: "The field or query parameter at fault" },
        request_id: { type: "string" },
      },
    },
  },
} as const;

export function errorResponses(...statuses: number[]) {
  return Object.fromEntries(
    [...statuses, 500].map((status) => [
      String(status),
      {
        description: `${STATUS[status]!.code}: ${STATUS[status]!.description}`,
        content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } },
      },
    ]),
  );
}

const message = {
  type: "object",
  properties: {
    id: { type: "integer" },
    role: { type: "string", enum: ["user", "assistant"] },
    content: { type: "string" },
    created_at: { type: "string", format: "date-time" },
    conversation_id: { type: "string" },
    user_id: { type: "integer" },
    finish_reason: { type: "string", enum: ["stop", "length", "cancelled"], description: "Assistant messages only" },
  },
} as const;

export const chatReplySchema = {
  type: "object",
  properties: {
    conversation_id: { type: "string" },
    new_conversation: { type: "boolean" },
    message,
    user_message: message,
    usage: {
      type: "object",
      properties: {
        prompt_tokens: { type: "integer" },
        completion_tokens: { type: "integer" },
        total_tokens: { type: "integer" },
        cached_tokens: { type: "integer" },
      },
    },
    model: { type: "string" },
  },
} as const;

export const messagePageSchema = {
  type: "object",
  properties: {
    data: { type: "array", items: message },
    pagination: {
      type: "object",
      properties: {
        current_page: { type: "integer" },
        rows_per_page: { type: "integer" },
        total_rows: { type: "integer" },
        total_pages: { type: "integer" },
      },
    },
  },
} as const;

export const SSE_DESCRIPTION = [
  "With `stream: true`: `text/event-stream`. Events, each `data` one line of JSON:",
  "`start` {conversation_id, new_conversation, user_message, model};",
  "`delta` {content} (all deltas concatenated are the final message.content);",
  "`done` (the same object as the non-streamed response);",
  "`error` {error} (generation failed after the stream began; the stream ends).",
  "Comment lines `: ping` keep an idle stream alive.",
].join(" ");
