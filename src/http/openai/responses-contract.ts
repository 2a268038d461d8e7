/**
 * OpenAI's Responses API bodies as Parley writes them (docs/API.md, "Responses"): the `response`
 * object and its output items, the subset Parley produces, closed so drift shows. The `openai`
 * SDK's types are the reference.
 */
import { type Static, Type as t } from "@sinclair/typebox";

const closed = { additionalProperties: false } as const;

const ItemStatus = t.Union([t.Literal("in_progress"), t.Literal("completed"), t.Literal("incomplete")]);

export const OutputText = t.Object(
  { type: t.Literal("output_text"), text: t.String(), annotations: t.Array(t.Never(), { maxItems: 0 }), logprobs: t.Array(t.Never(), { maxItems: 0 }) },
  closed,
);

export const MessageItem = t.Object(
  { type: t.Literal("message"), id: t.String(), status: ItemStatus, role: t.Literal("assistant"), content: t.Array(OutputText) },
  closed,
);

export const FunctionCallItem = t.Object(
  {
    type: t.Literal("function_call"),
    id: t.String(),
    call_id: t.String({ description: "What a function_call_output item answers" }),
    name: t.String(),
    arguments: t.String({ description: "JSON text of an object valid against the function's parameters" }),
    status: ItemStatus,
  },
  closed,
);

export const ReasoningItem = t.Object(
  {
    type: t.Literal("reasoning"),
    id: t.String(),
    summary: t.Array(t.Never(), { maxItems: 0 }),
    content: t.Array(t.Object({ type: t.Literal("reasoning_text"), text: t.String() }, closed), { description: "A reasoning model's thought, whole" }),
    status: ItemStatus,
  },
  closed,
);

export const McpListToolsItem = t.Object(
  {
    type: t.Literal("mcp_list_tools"),
    id: t.String(),
    server_label: t.String(),
    tools: t.Array(
      t.Object(
        {
          name: t.String(),
          description: t.Union([t.String(), t.Null()]),
          input_schema: t.Record(t.String(), t.Unknown()),
          annotations: t.Union([t.Record(t.String(), t.Unknown()), t.Null()]),
        },
        closed,
      ),
    ),
    error: t.Union([t.String(), t.Null()], { description: "Why the server's tools could not be listed" }),
  },
  closed,
);

const McpCallError = t.Union([
  t.Object({ type: t.Literal("mcp_tool_execution_error"), content: t.Unknown({ description: "The content the tool answered with" }) }, closed),
  t.Object({ type: t.Literal("mcp_protocol_error"), code: t.Integer(), message: t.String() }, closed),
]);

export const McpCallItem = t.Object(
  {
    type: t.Literal("mcp_call"),
    id: t.String(),
    server_label: t.String(),
    name: t.String(),
    arguments: t.String({ description: "JSON text of the call's arguments, as the model wrote them" }),
    output: t.Union([t.String(), t.Null()], { description: "The tool's result as text, cut at the server's max_result_bytes; data, never items" }),
    error: t.Union([McpCallError, t.Null()], {
      description: "Why the call has no output: the tool failed, or the protocol or server did. The model is shown it",
    }),
    approval_request_id: t.Union([t.String(), t.Null()], { description: "The approval request it was made on, if it waited for one" }),
    status: t.Union([t.Literal("in_progress"), t.Literal("calling"), t.Literal("completed"), t.Literal("failed")]),
  },
  closed,
);

export const McpApprovalRequestItem = t.Object(
  { type: t.Literal("mcp_approval_request"), id: t.String(), server_label: t.String(), name: t.String(), arguments: t.String() },
  closed,
);

export const OutputItem = t.Union([ReasoningItem, MessageItem, FunctionCallItem, McpListToolsItem, McpCallItem, McpApprovalRequestItem]);
export type OutputItem = Static<typeof OutputItem>;

const InputText = t.Object({ type: t.Literal("input_text"), text: t.String() }, closed);
const InputImage = t.Object(
  { type: t.Literal("input_image"), image_url: t.String({ description: "The picture as a data URL" }), file_id: t.Null(), detail: t.Literal("auto") },
  closed,
);

/** An item a response was given, as `input_items` lists it; an assistant message is listed as output. */
export const InputItem = t.Union([
  t.Object(
    {
      type: t.Literal("message"),
      id: t.String(),
      status: t.Literal("completed"),
      role: t.Union([t.Literal("user"), t.Literal("system"), t.Literal("developer")]),
      content: t.Array(t.Union([InputText, InputImage]), { description: "The message's text, and a user's pictures where they stand in it" }),
    },
    closed,
  ),
  MessageItem,
  FunctionCallItem,
  t.Object({ type: t.Literal("function_call_output"), id: t.String(), call_id: t.String(), output: t.String(), status: t.Literal("completed") }, closed),
  ReasoningItem,
  McpListToolsItem,
  McpCallItem,
  McpApprovalRequestItem,
  t.Object(
    {
      type: t.Literal("mcp_approval_response"),
      id: t.String(),
      approval_request_id: t.String(),
      approve: t.Boolean(),
      reason: t.Union([t.String(), t.Null()]),
    },
    closed,
  ),
]);
export type InputItem = Static<typeof InputItem>;

export const InputItemList = t.Object(
  {
    object: t.Literal("list"),
    data: t.Array(InputItem),
    first_id: t.Union([t.String(), t.Null()]),
    last_id: t.Union([t.String(), t.Null()]),
    has_more: t.Boolean(),
  },
  closed,
);
export type InputItemList = Static<typeof InputItemList>;

export const DeletedResponse = t.Object({ id: t.String(), object: t.Literal("response"), deleted: t.Literal(true) }, closed);

const TextFormat = t.Union([
  t.Object({ type: t.Literal("text") }, closed),
  t.Object({ type: t.Literal("json_object") }, closed),
  t.Object(
    {
      type: t.Literal("json_schema"),
      name: t.String(),
      schema: t.Record(t.String(), t.Unknown()),
      strict: t.Optional(t.Union([t.Boolean(), t.Null()])),
      description: t.Optional(t.String()),
    },
    closed,
  ),
]);

export const ResponseUsage = t.Object(
  {
    input_tokens: t.Integer(),
    input_tokens_details: t.Object(
      { cached_tokens: t.Integer(), cache_write_tokens: t.Integer({ description: "Parley writes no separate cache: 0" }) },
      closed,
    ),
    output_tokens: t.Integer(),
    output_tokens_details: t.Object({ reasoning_tokens: t.Integer({ description: "Of output_tokens, the thought's" }) }, closed),
    total_tokens: t.Integer(),
  },
  closed,
);

export const ResponseObject = t.Object(
  {
    id: t.String({ description: "resp_…" }),
    object: t.Literal("response"),
    created_at: t.Integer({ description: "Unix seconds" }),
    status: t.Union([t.Literal("in_progress"), t.Literal("completed"), t.Literal("incomplete"), t.Literal("cancelled"), t.Literal("failed")], {
      description: "cancelled: its client left while it was generated (what was said is kept); failed: error says why",
    }),
    error: t.Union([t.Null(), t.Object({ code: t.Literal("server_error"), message: t.String() }, closed)]),
    incomplete_details: t.Union([t.Null(), t.Object({ reason: t.Literal("max_output_tokens") }, closed)]),
    instructions: t.Union([t.String(), t.Null()]),
    max_output_tokens: t.Union([t.Integer(), t.Null()]),
    model: t.String({ description: "The loaded model, whatever the request named" }),
    output: t.Array(OutputItem),
    parallel_tool_calls: t.Boolean(),
    previous_response_id: t.Union([t.String(), t.Null()]),
    conversation: t.Union([t.Object({ id: t.String() }, closed), t.Null()], {
      description: "The conversation it was answered in: its input and output are that conversation's items",
    }),
    store: t.Boolean({ description: "Kept: it can be retrieved, continued and deleted" }),
    background: t.Boolean({ description: "Generated whatever its client does; its stream's events are kept" }),
    temperature: t.Number(),
    top_p: t.Union([t.Number(), t.Null()], { description: "As the request gave it; null: Parley's default (docs/API.md, Sampling)" }),
    text: t.Object({ format: TextFormat }, closed),
    tool_choice: t.Union([
      t.Literal("none"),
      t.Literal("auto"),
      t.Literal("required"),
      t.Object({ type: t.Literal("function"), name: t.String() }, closed),
      t.Object({ type: t.Literal("mcp"), server_label: t.String(), name: t.Optional(t.Union([t.String(), t.Null()])) }, closed),
    ]),
    tools: t.Array(t.Record(t.String(), t.Unknown())),
    truncation: t.Literal("auto"),
    metadata: t.Record(t.String(), t.String()),
    usage: t.Union([ResponseUsage, t.Null()], { description: "null until the response has ended" }),
  },
  closed,
);
export type ResponseObject = Static<typeof ResponseObject>;

export const ResponseEvent = t.Object(
  { type: t.String({ description: "response.created, response.output_text.delta, …" }), sequence_number: t.Integer({ minimum: 0 }) },
  { additionalProperties: true, description: "One of OpenAI's typed stream events: docs/API.md lists those Parley sends" },
);

export const ConversationObject = t.Object(
  {
    id: t.String({ description: "The conversation's id: conv_… when created here; the native API's conversation_id" }),
    object: t.Literal("conversation"),
    created_at: t.Integer({ description: "Unix seconds" }),
    metadata: t.Record(t.String(), t.String()),
  },
  closed,
);
export type ConversationObject = Static<typeof ConversationObject>;

export const DeletedConversation = t.Object({ id: t.String(), object: t.Literal("conversation.deleted"), deleted: t.Literal(true) }, closed);
