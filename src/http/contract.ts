/**
 * The response bodies of API v1.0 (docs/API.md), written once: JSON Schema
 * (TypeBox) for the OpenAPI document, and TypeScript types for the presenters, the tests and
 * the browser page. Closed objects (`additionalProperties: false`) wherever the contract fixes
 * the shape, so drift shows.
 *
 * Built with TypeBox itself rather than Elysia's `t` (the same objects): browser code imports
 * this module type-only, and importing anything of "elysia" would pull Bun's types into the
 * page's typecheck, which must not see server APIs.
 */
import { type SchemaOptions, type Static, Type as t } from "@sinclair/typebox";
import { CONVERSATION_ROLES, FINISH_REASONS, QUOTA_PERIODS } from "../vocabulary";

const closed = { additionalProperties: false } as const;

/** How many days `GET /api/v1.0/usage` reports. */
export const USAGE_DAYS = 30;

const oneOf = <const V extends readonly string[]>(values: V, options?: SchemaOptions) =>
  t.Union(
    values.map((value) => t.Literal(value as V[number])),
    options,
  );

/** The `code` of an error body; which status carries which is src/http/errors.ts's table. */
export const ERROR_CODES = [
  "bad_request",
  "invalid_json",
  "unauthorized",
  "forbidden",
  "not_found",
  "model_not_found",
  "method_not_allowed",
  "request_timeout",
  "payload_too_large",
  "unsupported_media_type",
  "invalid_request",
  "rate_limited",
  "quota_exceeded",
  "overloaded",
  "dependency_failed",
  "internal",
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

export const ErrorBody = t.Object(
  {
    error: t.Object(
      {
        code: oneOf(ERROR_CODES),
        message: t.String(),
        param: t.Optional(t.String({ description: "The field or query parameter at fault" })),
        request_id: t.String(),
      },
      closed,
    ),
  },
  closed,
);
export type ErrorBody = Static<typeof ErrorBody>;

export const Message = t.Object(
  {
    id: t.Integer(),
    role: oneOf(CONVERSATION_ROLES),
    content: t.String(),
    reasoning: t.Optional(t.String({ description: "Assistant messages of a reasoning model only: its thought, which is never part of content" })),
    created_at: t.String({ format: "date-time" }),
    conversation_id: t.String(),
    user_id: t.Integer(),
    finish_reason: t.Optional(oneOf(FINISH_REASONS, { description: "Assistant messages only" })),
    model: t.Optional(t.String({ description: "Assistant messages only: the model that wrote the reply" })),
    image_count: t.Optional(t.Integer({ minimum: 1, description: "User messages with pictures only: how many it has" })),
    images: t.Optional(
      t.Array(t.String(), {
        description:
          "The listing's user messages with pictures only (a chat reply's user_message has image_count alone): each as a data URL, seen after content",
      }),
    ),
  },
  closed,
);
export type Message = Static<typeof Message>;

export const Usage = t.Object(
  {
    prompt_tokens: t.Integer({ description: "The whole prompt the reply was conditioned on, history included" }),
    completion_tokens: t.Integer(),
    total_tokens: t.Integer(),
    cached_tokens: t.Optional(t.Integer({ description: "Of prompt_tokens, how many were reused from a cache" })),
  },
  closed,
);

/** A call of a listed MCP server's tool, as the model wrote it: the stream's `tool_call` event. */
export const ChatToolCallStart = t.Object(
  {
    id: t.String(),
    server: t.String({ description: "The label of the server (one of the request's tools)" }),
    name: t.String(),
    arguments: t.String({ description: "The arguments the model wrote, JSON text" }),
  },
  closed,
);
export type ChatToolCallStart = Static<typeof ChatToolCallStart>;

/** The call made: its output, or why it has none (the stream's `tool_result` event, and the reply's `tool_calls`). */
export const ChatToolCall = t.Object(
  {
    ...ChatToolCallStart.properties,
    output: t.Union([t.String(), t.Null()], {
      description: "What the tool answered, as text (kept as data, capped by the server's limit); null when it failed",
    }),
    error: t.Union(
      [
        t.Object(
          {
            type: oneOf(["tool", "protocol"] as const, {
              description: "tool: the tool answered with an error; protocol: the call failed (server down, timeout, ...)",
            }),
            message: t.String(),
          },
          closed,
        ),
        t.Null(),
      ],
      { description: "Why the call has no output; null when it has" },
    ),
  },
  closed,
);
export type ChatToolCall = Static<typeof ChatToolCall>;

export const ChatReply = t.Object(
  {
    conversation_id: t.String(),
    new_conversation: t.Boolean(),
    message: Message,
    user_message: Message,
    tool_calls: t.Optional(
      t.Array(ChatToolCall, {
        description: "A turn with tools only: the calls of the servers' tools it made before its reply, in order (stored with the conversation)",
      }),
    ),
    usage: Usage,
    model: t.String(),
  },
  closed,
);
export type ChatReply = Static<typeof ChatReply>;

/** The stream's `start` event: the user's message is stored, generation is next. */
export const ChatStart = t.Object(
  {
    conversation_id: t.String(),
    new_conversation: t.Boolean(),
    user_message: Message,
    model: t.String(),
  },
  closed,
);
export type ChatStart = Static<typeof ChatStart>;

/** The stream's `delta` event: the next piece of the reply's text. */
export const ChatDelta = t.Object({ content: t.String() }, closed);
export type ChatDelta = Static<typeof ChatDelta>;

/** The stream's `reasoning` event, before any `delta`: the next piece of a reasoning model's thought. */
export const ChatReasoning = t.Object({ content: t.String() }, closed);
export type ChatReasoning = Static<typeof ChatReasoning>;

/** Every listing's: the page asked for, and how many rows and pages there are in all. */
export const Pagination = t.Object(
  {
    current_page: t.Integer(),
    rows_per_page: t.Integer(),
    total_rows: t.Integer(),
    total_pages: t.Integer(),
  },
  closed,
);
export type Pagination = Static<typeof Pagination>;

export const MessagePage = t.Object({ data: t.Array(Message), pagination: Pagination }, closed);
export type MessagePage = Static<typeof MessagePage>;

export const Conversation = t.Object(
  {
    conversation_id: t.String(),
    title: t.String({ description: "The first user message, at most 100 characters" }),
    created_at: t.String({ format: "date-time" }),
    updated_at: t.String({ format: "date-time", description: "The newest message's time" }),
    message_count: t.Integer({ description: "Messages of both roles" }),
  },
  closed,
);
export type Conversation = Static<typeof Conversation>;

export const ConversationPage = t.Object({ data: t.Array(Conversation), pagination: Pagination }, closed);
export type ConversationPage = Static<typeof ConversationPage>;

/** One UTC day of a user's replies' tokens, as their `usage` counted them. */
export const UsageDayJson = t.Object(
  {
    date: t.String({ format: "date", description: "The UTC day" }),
    prompt_tokens: t.Integer(),
    completion_tokens: t.Integer(),
    total_tokens: t.Integer(),
  },
  closed,
);

/** A user's token budget this period, where a quota applies. */
export const QuotaJson = t.Object(
  {
    limit: t.Integer({ description: "Tokens (prompt and completion) per period" }),
    period: oneOf(QUOTA_PERIODS, { description: "A UTC calendar day or month" }),
    used: t.Integer({ description: "Tokens the user's replies used this period" }),
    remaining: t.Integer({ description: "Of the limit, neither used nor held by replies still generating" }),
    resets_at: t.String({ format: "date-time", description: "When the period ends and the budget is whole again" }),
  },
  closed,
);
export type QuotaJson = Static<typeof QuotaJson>;

export const UsageReport = t.Object(
  {
    user_id: t.Integer(),
    quota: t.Union([QuotaJson, t.Null()], { description: "The quota that applies (the user's own, else the default); null: no limit" }),
    days: t.Array(UsageDayJson, { description: `The last ${USAGE_DAYS} UTC days, today's last; days without replies are absent` }),
  },
  closed,
);
export type UsageReport = Static<typeof UsageReport>;

/** A configured quota: a user's own, or the default for every user without one (`user_id` null). */
export const QuotaEntryJson = t.Object(
  {
    user_id: t.Union([t.Integer(), t.Null()]),
    user: t.Union([t.String(), t.Null()], { description: "The user's name; null for the default" }),
    limit: t.Integer(),
    period: oneOf(QUOTA_PERIODS),
    used: t.Union([t.Integer(), t.Null()], { description: "The user's tokens this period; null for the default" }),
    remaining: t.Union([t.Integer(), t.Null()]),
    resets_at: t.String({ format: "date-time" }),
  },
  closed,
);
export type QuotaEntryJson = Static<typeof QuotaEntryJson>;

export const QuotaList = t.Object({ data: t.Array(QuotaEntryJson, { description: "The default first, then users' quotas by user id" }) }, closed);
export type QuotaList = Static<typeof QuotaList>;

export const NativesBuild = t.Object(
  {
    state: t.Union([t.Literal("building"), t.Literal("built"), t.Literal("failed")]),
    step: t.Optional(t.String({ description: "The build's last step, e.g. [120/264]" })),
    elapsed_s: t.Integer(),
    reason: t.Optional(t.String({ description: "Why it failed" })),
  },
  { ...closed, description: "Parley's compiled natives being built behind a server serving on the npm prebuilt meanwhile; it restarts onto them once built" },
);
export type NativesBuild = Static<typeof NativesBuild>;

export const Health = t.Object({ status: t.Literal("ok"), natives_build: t.Optional(NativesBuild) }, closed);
export type Health = Static<typeof Health>;

export const Ready = t.Object({ status: t.Literal("ready") }, closed);
export type Ready = Static<typeof Ready>;
