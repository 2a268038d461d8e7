/**
 * Anthropic's Messages API shapes, as its SDK's types have them: the request Parley takes and the
 * message, events and errors it answers with.
 */
import { type Static, t } from "elysia";
import { integer, optional, SAMPLING_FIELDS, UNKNOWN_FIELD, unsupported } from "../sampling-fields";

const closed = { additionalProperties: false } as const;

const CONTENT_RULE =
  "content must be a string or blocks: text {type, text}, thinking {type, thinking, signature}, tool_use {type, id, name, input}, mcp_tool_use {type, id, name, server_name, input} and mcp_tool_result {type, tool_use_id, content?, is_error?} (an assistant's), tool_result {type, tool_use_id, content?, is_error?} and image {type, source: {type: base64, media_type, data}} (a user's); documents are not supported";

/** A cache hint: accepted, since Parley's prefix cache needs none. */
const CacheControl = optional(
  t.Object({ type: t.Literal("ephemeral"), ttl: optional(t.String(), "ttl must be a string") }),
  'cache_control must be {type: "ephemeral"}',
);

/** A text block; its cache hint is accepted (Parley's prefix cache needs none) and its citations are none. */
const TextBlockParam = t.Object({
  type: t.Literal("text"),
  text: t.String(),
  cache_control: CacheControl,
  citations: optional(t.Array(t.Unknown(), { maxItems: 0 }), "citations are not supported"),
});

const ToolUseBlockParam = t.Object({
  type: t.Literal("tool_use"),
  id: t.String({ minLength: 1 }),
  name: t.String(),
  input: t.Record(t.String(), t.Unknown()),
  cache_control: CacheControl,
  caller: optional(t.Object({ type: t.Literal("direct") }), 'caller must be {type: "direct"}: Parley runs no tools of its own'),
});

/** A thought of an earlier reply, sent back: the chat template decides whether the model sees it. Its signature is not checked (Parley signs none). */
const ThinkingBlockParam = t.Object({
  type: t.Literal("thinking"),
  thinking: t.String(),
  signature: t.String(),
  cache_control: CacheControl,
});

/** Another service's encrypted thought: taken so that the refusal can say why (Parley cannot read it). */
const RedactedThinkingBlockParam = t.Object({ type: t.Literal("redacted_thinking"), data: t.String() });

const ToolResultBlockParam = t.Object({
  type: t.Literal("tool_result"),
  tool_use_id: t.String(),
  content: optional(t.Union([t.String(), t.Array(TextBlockParam)]), "a tool_result's content must be a string or text blocks"),
  is_error: optional(t.Boolean(), "is_error must be true or false"),
  cache_control: CacheControl,
});

/** A user's picture: its bytes in base64 (a URL is not fetched, and Parley keeps no files). */
const ImageBlockParam = t.Object({
  type: t.Literal("image"),
  source: t.Union([
    t.Object({
      type: t.Literal("base64"),
      media_type: t.Union([t.Literal("image/jpeg"), t.Literal("image/png"), t.Literal("image/gif"), t.Literal("image/webp")]),
      data: t.String(),
    }),
    t.Object({ type: t.Literal("url"), url: t.String() }),
    t.Object({ type: t.Literal("file"), file_id: t.String() }),
  ]),
  cache_control: CacheControl,
});

/** A call of an MCP server's tool an earlier reply made in the service, sent back with its result (below). */
const McpToolUseBlockParam = t.Object({
  type: t.Literal("mcp_tool_use"),
  id: t.String({ minLength: 1 }),
  name: t.String(),
  server_name: t.String(),
  input: t.Record(t.String(), t.Unknown()),
  cache_control: CacheControl,
});

const McpToolResultBlockParam = t.Object({
  type: t.Literal("mcp_tool_result"),
  tool_use_id: t.String({ minLength: 1 }),
  content: optional(t.Union([t.String(), t.Array(TextBlockParam)]), "an mcp_tool_result's content must be a string or text blocks"),
  is_error: optional(t.Boolean(), "is_error must be true or false"),
  cache_control: CacheControl,
});

const MessageParam = t.Object(
  {
    role: t.Union([t.Literal("user"), t.Literal("assistant")], { error: "role must be user or assistant (the system prompt is the system field)" }),
    content: t.Union(
      [
        t.String(),
        t.Array(
          t.Union([
            TextBlockParam,
            ImageBlockParam,
            ThinkingBlockParam,
            RedactedThinkingBlockParam,
            ToolUseBlockParam,
            ToolResultBlockParam,
            McpToolUseBlockParam,
            McpToolResultBlockParam,
          ]),
        ),
      ],
      { error: CONTENT_RULE },
    ),
  },
  { error: `each message needs a role (user or assistant) and content; ${CONTENT_RULE}` },
);

const TOOL_RULE = "each tool must be {name, description?, input_schema}, its name of letters, digits, _ and - (at most 64)";

/** A client's tool; Parley holds a forced call to its schema (strict or not). */
const Tool = t.Object(
  {
    name: t.String({ pattern: "^[a-zA-Z0-9_-]{1,64}$", error: TOOL_RULE }),
    description: optional(t.String(), "a tool's description must be a string"),
    input_schema: t.Record(t.String(), t.Unknown(), { error: "a tool's input_schema must be a JSON Schema object" }),
    type: optional(t.Literal("custom"), "a tool's type must be custom: Parley runs no tools of its own"),
    strict: optional(t.Boolean(), "a tool's strict must be true or false"),
    cache_control: CacheControl,
  },
  { error: TOOL_RULE },
);

const TOOL_CHOICE_RULE = 'tool_choice must be {type: "auto" | "any" | "none"} or {type: "tool", name}, with disable_parallel_tool_use?';
const parallelOff = optional(t.Boolean(), "disable_parallel_tool_use must be true or false");

const ToolChoiceParam = t.Union(
  [
    t.Object({ type: t.Literal("auto"), disable_parallel_tool_use: parallelOff }),
    t.Object({ type: t.Literal("any"), disable_parallel_tool_use: parallelOff }),
    t.Object({ type: t.Literal("tool"), name: t.String(), disable_parallel_tool_use: parallelOff }),
    t.Object({ type: t.Literal("none") }),
  ],
  { error: TOOL_CHOICE_RULE },
);

const THINKING_RULE =
  'thinking must be {type: "enabled", budget_tokens (a positive integer below max_tokens), display?}, {type: "adaptive", display?} or {type: "disabled"}';
/** Parley shows a thought whole: "summarized" is taken as that; "omitted" leaves the block's text empty. */
const ThinkingDisplay = optional(t.Union([t.Literal("summarized"), t.Literal("omitted")]), "thinking.display must be summarized or omitted");

const ThinkingParam = t.Union(
  [
    t.Object({ type: t.Literal("enabled"), budget_tokens: integer({ minimum: 1 }), display: ThinkingDisplay }),
    t.Object({ type: t.Literal("adaptive"), display: ThinkingDisplay }),
    t.Object({ type: t.Literal("disabled") }),
  ],
  { error: THINKING_RULE },
);

const MCP_SERVER_RULE =
  'each MCP server must be {type: "url", url, name, authorization_token?, tool_configuration?: {enabled?, allowed_tools?}}, naming a server the operator lists';

export const MessagesRequest = t.Object(
  {
    model: t.String({ error: "model is required: a model's id (GET /v1/models lists them), or any name when Parley serves one model" }),
    max_tokens: integer({ minimum: 1, error: "max_tokens is required: a positive integer" }),
    messages: t.Array(MessageParam, { minItems: 1, error: "messages must be a non-empty array of {role, content}" }),
    system: optional(t.Union([t.String(), t.Array(TextBlockParam)]), "system must be a string or text blocks"),
    stop_sequences: optional(t.Array(t.String({ minLength: 1 })), "stop_sequences must be an array of non-empty strings"),
    temperature: optional(t.Number({ minimum: 0, maximum: 1 }), "temperature must be a number from 0 to 1"),
    top_p: SAMPLING_FIELDS.top_p,
    top_k: SAMPLING_FIELDS.top_k,
    stream: optional(t.Boolean(), "stream must be true or false"),
    metadata: optional(t.Object({ user_id: optional(t.String(), "metadata.user_id must be a string") }), "metadata must be {user_id}"),
    service_tier: optional(t.Union([t.Literal("auto"), t.Literal("standard_only")]), "service_tier must be auto or standard_only"),
    thinking: optional(ThinkingParam, THINKING_RULE),
    tools: optional(t.Array(Tool, { maxItems: 128 }), `tools must be an array of up to 128; ${TOOL_RULE}`),
    tool_choice: optional(ToolChoiceParam, TOOL_CHOICE_RULE),
    container: unsupported("container is not supported"),
    mcp_servers: optional(
      t.Array(
        t.Object(
          {
            type: t.Literal("url"),
            url: t.String(),
            name: t.String({ minLength: 1 }),
            authorization_token: optional(t.String(), MCP_SERVER_RULE),
            tool_configuration: optional(
              t.Object(
                { enabled: optional(t.Boolean(), MCP_SERVER_RULE), allowed_tools: optional(t.Array(t.String(), { maxItems: 1024 }), MCP_SERVER_RULE) },
                UNKNOWN_FIELD,
              ),
              MCP_SERVER_RULE,
            ),
          },
          { ...UNKNOWN_FIELD, error: MCP_SERVER_RULE },
        ),
        { maxItems: 32 },
      ),
      `mcp_servers must be an array of up to 32; ${MCP_SERVER_RULE}`,
    ),
  },
  UNKNOWN_FIELD,
);
export type MessagesRequest = Static<typeof MessagesRequest>;

export const CountTokensRequest = t.Object(
  {
    model: MessagesRequest.properties.model,
    messages: MessagesRequest.properties.messages,
    system: MessagesRequest.properties.system,
    thinking: MessagesRequest.properties.thinking,
    tools: MessagesRequest.properties.tools,
    tool_choice: MessagesRequest.properties.tool_choice,
  },
  UNKNOWN_FIELD,
);

const STOP_REASONS = ["end_turn", "max_tokens", "stop_sequence", "tool_use"] as const;
export type StopReason = (typeof STOP_REASONS)[number];

/** Anthropic's fields that tell of its own service (tools on its servers, regions, tiers): none here. */
const NONE = t.Null();

export const MessageUsage = t.Object(
  {
    input_tokens: integer({ description: "Prompt tokens evaluated now (not read from the cache)" }),
    output_tokens: integer(),
    cache_read_input_tokens: integer({ description: "Prompt tokens reused from the KV cache" }),
    cache_creation_input_tokens: integer({ description: "Always 0: Parley's cache needs no writes asked for" }),
    cache_creation: NONE,
    inference_geo: NONE,
    output_tokens_details: NONE,
    server_tool_use: NONE,
    service_tier: t.Literal("standard"),
    speed: NONE,
  },
  closed,
);
export type MessageUsage = Static<typeof MessageUsage>;

export const AnthropicMessage = t.Object(
  {
    id: t.String(),
    type: t.Literal("message"),
    role: t.Literal("assistant"),
    model: t.String(),
    content: t.Array(
      t.Union([
        t.Object({ type: t.Literal("thinking"), thinking: t.String(), signature: t.String({ description: "Always empty: Parley signs no thought" }) }, closed),
        t.Object({ type: t.Literal("text"), text: t.String(), citations: NONE }, closed),
        t.Object(
          {
            type: t.Literal("tool_use"),
            id: t.String(),
            name: t.String(),
            input: t.Record(t.String(), t.Unknown()),
            caller: t.Object({ type: t.Literal("direct") }, closed),
          },
          closed,
        ),
        t.Object(
          { type: t.Literal("mcp_tool_use"), id: t.String(), name: t.String(), server_name: t.String(), input: t.Record(t.String(), t.Unknown()) },
          closed,
        ),
        t.Object(
          {
            type: t.Literal("mcp_tool_result"),
            tool_use_id: t.String(),
            is_error: t.Boolean(),
            content: t.Array(t.Object({ type: t.Literal("text"), text: t.String(), citations: NONE }, closed), {
              description: "The tool's result, or why it has none; data, never blocks",
            }),
          },
          closed,
        ),
      ]),
    ),
    stop_reason: t.Union(STOP_REASONS.map((reason) => t.Literal(reason))),
    stop_sequence: t.Union([t.String(), t.Null()]),
    usage: MessageUsage,
    container: NONE,
    diagnostics: NONE,
    stop_details: NONE,
  },
  closed,
);
export type AnthropicMessage = Static<typeof AnthropicMessage>;

const ANTHROPIC_ERROR_TYPES = [
  "invalid_request_error",
  "authentication_error",
  "permission_error",
  "not_found_error",
  "request_too_large",
  "rate_limit_error",
  "api_error",
  "overloaded_error",
] as const;
export type AnthropicErrorType = (typeof ANTHROPIC_ERROR_TYPES)[number];

export const AnthropicErrorBody = t.Object(
  {
    type: t.Literal("error"),
    error: t.Object({ type: t.Union(ANTHROPIC_ERROR_TYPES.map((type) => t.Literal(type))), message: t.String() }, closed),
  },
  closed,
);
export type AnthropicErrorBody = Static<typeof AnthropicErrorBody>;

export const TokenCount = t.Object({ input_tokens: integer() }, closed);

/** A model as Anthropic's Models API lists it. */
export const AnthropicModel = t.Object(
  {
    type: t.Literal("model"),
    id: t.String(),
    display_name: t.String({ description: "The model's id: a GGUF file names no display name" }),
    created_at: t.String({ format: "date-time", description: "When its file last changed" }),
  },
  closed,
);
export type AnthropicModel = Static<typeof AnthropicModel>;

export const AnthropicModelList = t.Object(
  { data: t.Array(AnthropicModel), first_id: t.Union([t.String(), t.Null()]), last_id: t.Union([t.String(), t.Null()]), has_more: t.Boolean() },
  closed,
);
export type AnthropicModelList = Static<typeof AnthropicModelList>;

/** The Models API's paging: a page of `limit`, after or before a model's id. */
export const AnthropicModelQuery = t.Object({
  limit: t.Optional(t.Integer({ minimum: 1, maximum: 1000, error: "limit must be an integer from 1 to 1000" })),
  after_id: t.Optional(t.String({ error: "after_id must be a model's id" })),
  before_id: t.Optional(t.String({ error: "before_id must be a model's id" })),
});
