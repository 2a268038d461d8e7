/**
 * OpenAI's Responses API (`/v1/responses`) over the same turn as chat completions: a third framing
 * of it. Input items become the history, the output its items; a response is kept (`store`,
 * OpenAI's default) and may be continued with `previous_response_id`, read, listed and deleted.
 * What Parley cannot honour is refused (docs/API.md, "Responses").
 */
import { Elysia, t } from "elysia";
import type { ResponseInput, ResponseService } from "../../chat/responses";
import type { Caller, ServerToolUse } from "../../chat/server-tools";
import { InvalidInput } from "../../errors";
import type { ReplyFormat } from "../../llm/engine";
import { requireKey } from "../auth";
import type { BackgroundResponses } from "../background-responses";
import { namingFields } from "../field-names";
import { type BodyLimits, jsonBody } from "../json-body";
import { toolRequestOf } from "../offered-tools";
import { responseFields } from "../openai/fields";
import { ITEM_PAGE_QUERY, ITEM_RULE, itemPageOf, QUERY_RULE, RESPONSE_ITEM, responseItemsOf } from "../openai/items";
import { inputItemList, type ResponseEcho, responseObject, responsesFraming } from "../openai/responses-present";
import { jsonResponse, openAiErrorResponses } from "../openapi";
import { RequestPictures } from "../pictures";
import { integer, optional, UNKNOWN_FIELD, unsupported } from "../sampling-fields";
import { hooksOf, type RequestHooks, type TurnDriver } from "../turn-driver";

const TOOL_RULE =
  'each tool must be {type: "function", name, description?, parameters?, strict?}, its name of letters, digits, _ and - (at most 64), or {type: "mcp", server_label, server_url?, allowed_tools?, require_approval?, headers?, authorization?, server_description?} naming a server the operator lists';

const TOOL_NAMES = t.Array(t.String(), { maxItems: 1024 });
const TOOL_FILTER = t.Object({ tool_names: t.Optional(TOOL_NAMES), read_only: t.Optional(t.Boolean()) }, UNKNOWN_FIELD);

const MCP_TOOL = t.Object(
  {
    type: t.Literal("mcp"),
    server_label: t.String({ minLength: 1 }),
    server_url: optional(t.String(), TOOL_RULE),
    server_description: optional(t.String(), TOOL_RULE),
    allowed_tools: optional(t.Union([TOOL_NAMES, TOOL_FILTER]), TOOL_RULE),
    require_approval: optional(
      t.Union([t.Literal("always"), t.Literal("never"), t.Object({ always: t.Optional(TOOL_FILTER), never: t.Optional(TOOL_FILTER) }, UNKNOWN_FIELD)]),
      TOOL_RULE,
    ),
    headers: optional(t.Record(t.String(), t.String(), { maxProperties: 32 }), TOOL_RULE),
    authorization: optional(t.String(), TOOL_RULE),
  },
  // OpenAI's connectors and fields Parley does not know are refused, not dropped.
  { ...UNKNOWN_FIELD, error: TOOL_RULE },
);

const responseRequest = t.Object(
  {
    input: t.Union([t.String(), t.Array(RESPONSE_ITEM, { minItems: 1 })], { error: ITEM_RULE }),
    model: optional(t.String(), "model must be a string"),
    instructions: optional(t.String(), "instructions must be a string"),
    store: optional(t.Boolean(), "store must be true or false"),
    stream: optional(t.Boolean(), "stream must be true or false"),
    temperature: optional(t.Number({ minimum: 0, maximum: 2 }), "temperature must be a number from 0 to 2"),
    top_p: optional(t.Number({ exclusiveMinimum: 0, maximum: 1 }), "top_p must be a number above 0, at most 1"),
    max_output_tokens: optional(integer({ minimum: 1 }), "max_output_tokens must be a positive integer"),
    tools: optional(
      t.Array(
        t.Union([
          t.Object(
            {
              type: t.Literal("function"),
              name: t.String({ pattern: "^[a-zA-Z0-9_-]{1,64}$" }),
              description: optional(t.String(), TOOL_RULE),
              parameters: optional(t.Record(t.String(), t.Unknown()), TOOL_RULE),
              // As OpenAI's Responses take it: strict unless it says otherwise.
              strict: optional(t.Boolean(), TOOL_RULE),
            },
            { error: TOOL_RULE },
          ),
          MCP_TOOL,
        ]),
        { maxItems: 128 },
      ),
      `tools must be an array of up to 128; ${TOOL_RULE}`,
    ),
    tool_choice: optional(
      t.Union([
        t.Literal("none"),
        t.Literal("auto"),
        t.Literal("required"),
        t.Object({ type: t.Literal("function"), name: t.String() }),
        t.Object({ type: t.Literal("mcp"), server_label: t.String(), name: t.Optional(t.Union([t.String(), t.Null()])) }),
      ]),
      'tool_choice must be "none", "auto", "required", {type: "function", name} or {type: "mcp", server_label, name?}',
    ),
    parallel_tool_calls: optional(t.Boolean(), "parallel_tool_calls must be true or false"),
    text: optional(
      t.Object({
        format: t.Optional(
          t.Union([
            t.Object({ type: t.Literal("text") }),
            t.Object({ type: t.Literal("json_object") }),
            t.Object({
              type: t.Literal("json_schema"),
              name: t.String({ pattern: "^[a-zA-Z0-9_-]{1,64}$" }),
              schema: t.Record(t.String(), t.Unknown()),
              description: t.Optional(t.String()),
              strict: t.Optional(t.Union([t.Boolean(), t.Null()])),
            }),
          ]),
        ),
      }),
      'text must be {format: {type: "text"}, {type: "json_object"} or {type: "json_schema", name, schema, strict?}}',
    ),
    metadata: optional(t.Record(t.String(), t.String({ maxLength: 512 }), { maxProperties: 16 }), "metadata must map up to 16 keys to strings"),
    // Parley drops a long history's oldest turns, as "auto" says.
    truncation: optional(t.Literal("auto"), 'truncation must be "auto": Parley drops the oldest turns of a history longer than the context'),
    // Fields that change nothing in the reply Parley gives.
    user: optional(t.String(), "user must be a string"),
    safety_identifier: optional(t.String(), "safety_identifier must be a string"),
    prompt_cache_key: optional(t.String(), "prompt_cache_key must be a string"),
    service_tier: optional(t.String(), "service_tier must be a string"),
    previous_response_id: optional(t.String({ minLength: 1 }), "previous_response_id must be the id of a kept response"),
    conversation: optional(
      t.Union([t.String({ minLength: 1 }), t.Object({ id: t.String({ minLength: 1 }) })]),
      "conversation must be a conversation's id, or {id}",
    ),
    background: optional(t.Boolean(), "background must be true or false"),
    include: optional(t.Array(t.Never(), { maxItems: 0 }), "include is not supported"),
    reasoning: unsupported("reasoning is not supported: the model's chat template decides how it reasons"),
    top_logprobs: unsupported("top_logprobs is not supported on /v1/responses yet (it is on /v1/chat/completions)"),
    max_tool_calls: unsupported("max_tool_calls is not supported"),
    prompt: unsupported("prompt templates are not supported"),
    stream_options: unsupported("stream_options is not supported"),
  },
  UNKNOWN_FIELD,
);

type ResponseRequest = typeof responseRequest.static;

function formatOf(format: NonNullable<ResponseRequest["text"]>["format"]): ReplyFormat | undefined {
  if (!format || format.type === "text") return undefined;
  return format.type === "json_object" ? { type: "json_object" } : { type: "json_schema", schema: format.schema, strict: format.strict === true };
}

type Tool = NonNullable<ResponseRequest["tools"]>[number];
type McpTool = Extract<Tool, { type: "mcp" }>;

/** The tool names a filter lists; `read_only` asks what Parley cannot tell of a tool, so it is refused. */
function toolNames(filter: typeof TOOL_FILTER.static | undefined, index: number, what: string): string[] {
  if (filter?.read_only !== undefined) throw new InvalidInput(`tools[${index}].${what}.read_only`, "read_only is not supported: list the tools by tool_names");
  return filter?.tool_names ?? [];
}

/** An `mcp` tool as the domain's use of a listed server. */
function serverToolUse(tool: McpTool, index: number): ServerToolUse {
  const approval = tool.require_approval ?? "always";
  const allowed =
    tool.allowed_tools == null ? undefined : Array.isArray(tool.allowed_tools) ? tool.allowed_tools : toolNames(tool.allowed_tools, index, "allowed_tools");
  return {
    index,
    label: tool.server_label,
    ...(tool.server_url != null ? { url: tool.server_url } : {}),
    headers: { ...(tool.headers ?? {}), ...(tool.authorization != null ? { Authorization: `Bearer ${tool.authorization}` } : {}) },
    ...(allowed !== undefined ? { allowedTools: allowed } : {}),
    // OpenAI's default: every call waits for approval.
    approval:
      typeof approval === "string"
        ? { always: approval === "always", except: [] }
        : approval.always !== undefined && approval.never === undefined
          ? { always: false, except: toolNames(approval.always, index, "require_approval.always") }
          : { always: true, except: toolNames(approval.never, index, "require_approval.never") },
  };
}

async function responseInput(body: ResponseRequest, pictures: RequestPictures, caller: Caller): Promise<Omit<ResponseInput, "signal" | "userId">> {
  const offered = (body.tools ?? []).map((tool, index) => ({ tool, index }));
  const servers = offered.flatMap(({ tool, index }) => (tool.type === "mcp" ? [serverToolUse(tool, index)] : []));
  const choice = body.tool_choice ?? undefined;
  // "required" with no function of the client's asks for a server's tool, any.
  const serverChoice =
    typeof choice === "object" && choice.type === "mcp"
      ? choice
      : choice === "required" && servers.length > 0 && !offered.some(({ tool }) => tool.type === "function")
        ? { server_label: undefined, name: undefined }
        : undefined;
  if (serverChoice?.server_label !== undefined && !servers.some((use) => use.label === serverChoice.server_label))
    throw new InvalidInput("tool_choice", `names MCP server ${JSON.stringify(serverChoice.server_label)}, which no tool of the request offers`);
  const tools = toolRequestOf({
    // OpenAI's Responses hold a function strictly unless it says otherwise.
    functions: offered.flatMap(({ tool, index }) => (tool.type === "function" ? [{ ...tool, strict: tool.strict !== false, index }] : [])),
    choice: serverChoice ? "auto" : typeof choice === "object" ? { name: choice.name! } : choice,
    parallel: body.parallel_tool_calls,
  });
  const format = formatOf(body.text?.format);
  const temperature = body.temperature ?? 1;
  const store = body.store ?? true;
  const conversation = typeof body.conversation === "object" && body.conversation !== null ? body.conversation.id : (body.conversation ?? undefined);
  const params: ResponseEcho = {
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    temperature,
    top_p: body.top_p ?? null,
    text: { format: body.text?.format ?? { type: "text" } },
    tool_choice: body.tool_choice ?? (tools ? "auto" : "none"),
    tools: (body.tools ?? []) as Record<string, unknown>[],
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    metadata: body.metadata ?? {},
    store,
    conversation: conversation === undefined ? null : { id: conversation },
  };
  return {
    ...(body.model != null ? { model: body.model } : {}),
    ...(body.instructions ? { instructions: body.instructions } : {}),
    input: await responseItemsOf(body.input, pictures),
    ...(body.previous_response_id ? { previousResponseId: body.previous_response_id } : {}),
    ...(conversation !== undefined ? { conversation } : {}),
    store,
    background: body.background === true,
    params,
    sampling: { temperature, topP: body.top_p ?? undefined },
    maxTokens: body.max_output_tokens ?? undefined,
    ...(format ? { format } : {}),
    ...(tools ? { tools } : {}),
    ...(servers.length > 0
      ? {
          serverTools: {
            uses: servers,
            caller,
            ...(choice === "none" ? { none: true } : {}),
            ...(serverChoice
              ? {
                  choice: {
                    ...(serverChoice.server_label !== undefined ? { server: serverChoice.server_label } : {}),
                    ...(serverChoice.name != null ? { name: serverChoice.name } : {}),
                  },
                }
              : {}),
          },
        }
      : {}),
  };
}

export interface ResponsesRouteDeps {
  responses: ResponseService;
  background: BackgroundResponses;
  turns: TurnDriver;
  body: BodyLimits;
}

const TAGS = ["OpenAI-compatible"];
/** How long a cancel waits for the response to end before answering with it as it stands. */
const CANCEL_WAIT_MS = 10_000;
const responseId = t.Object({ id: t.String() });
const NOT_FOUND = { "404": { ...openAiErrorResponses("not_found")["404"]!, description: "not_found: the caller has no kept response by this id" } };

export const responsesRoutes = (deps: ResponsesRouteDeps) =>
  new Elysia({ name: "parley/routes/responses" })
    .onBeforeHandle(namingFields(responseFields))
    .use(requireKey)
    .post(
      "/v1/responses",
      async function* ({ body, principal, request, server, set }) {
        const input = await responseInput(body, new RequestPictures(deps.body.pictureHosts), principal);
        const turn = (hooks: RequestHooks) => deps.responses.respond({ ...input, userId: principal.userId, ...hooks });
        const exchange = { request, set, server, keyId: principal.keyId };
        if (input.background) {
          const started = await deps.background.start((signal) => turn(hooksOf(exchange, signal)));
          if (body.stream !== true) return responseObject(started);
          // This stream is one follower of the response: leaving it stops nothing.
          yield* deps.turns.replay(exchange, (signal) => deps.background.events(principal.userId, started.id, -1, signal));
          return;
        }
        if (body.stream !== true) {
          const ended = await deps.turns.complete(exchange, turn);
          return ended && responseObject(ended.response);
        }
        yield* deps.turns.stream(exchange, turn, responsesFraming());
      },
      {
        auth: "key",
        body: responseRequest,
        parse: jsonBody(deps.body, { pictures: true }),
        detail: {
          summary: "OpenAI-compatible Responses, kept unless store is false (JSON, or OpenAI's typed events with stream: true)",
          tags: TAGS,
          responses: {
            "200": jsonResponse(
              "The response; with stream: true, text/event-stream of OpenAI's typed events (ResponseEvent), the last response.completed, response.incomplete or response.failed",
              "ResponseObject",
            ),
            ...openAiErrorResponses(
              "invalid_json",
              "invalid_input",
              "unauthorized",
              "payload_too_large",
              "unsupported_media_type",
              "rate_limited",
              "quota_exceeded",
              "overloaded",
              "dependency_failed",
            ),
            "404": {
              ...openAiErrorResponses("not_found", "model_not_found")["404"]!,
              description: "not_found: the caller has no kept response by the previous_response_id; model_not_found: no such model",
            },
          },
        },
      },
    )
    .get(
      "/v1/responses/:id",
      async function* ({ params, principal, query, request, server, set }) {
        const record = await deps.responses.get(principal.userId, params.id);
        if (query.stream !== "true") {
          if (query.starting_after !== undefined) throw new InvalidInput("starting_after", "starting_after needs stream=true");
          return responseObject(await deps.background.asStands(record));
        }
        if (!record.background)
          throw new InvalidInput("stream", "only a background response's stream is kept: this response was not made with background: true");
        const after = query.starting_after ?? -1;
        yield* deps.turns.replay({ request, set, server, keyId: principal.keyId }, (signal) =>
          deps.background.events(principal.userId, record.id, after, signal),
        );
      },
      {
        auth: "key",
        params: responseId,
        query: t.Object(
          {
            stream: t.Optional(t.Union([t.Literal("true"), t.Literal("false")], { error: "stream must be true or false" })),
            starting_after: t.Optional(t.Integer({ minimum: -1, error: "starting_after must be an event's sequence_number" })),
          },
          { additionalProperties: false, error: QUERY_RULE },
        ),
        detail: {
          summary: "A kept response as it stands; with stream=true (background responses), its events after starting_after, then the rest as they come",
          tags: TAGS,
          responses: {
            "200": jsonResponse("The response; with stream=true, text/event-stream of its typed events (ResponseEvent)", "ResponseObject"),
            ...openAiErrorResponses("invalid_input", "unauthorized", "rate_limited"),
            ...NOT_FOUND,
          },
        },
      },
    )
    .post(
      "/v1/responses/:id/cancel",
      async ({ params, principal }) => {
        const record = await deps.responses.get(principal.userId, params.id);
        if (!record.background) throw new InvalidInput("id", "only a background response can be cancelled");
        const ended = await deps.background.cancel(principal.userId, record.id, CANCEL_WAIT_MS);
        return responseObject(await deps.background.asStands(ended ?? record));
      },
      {
        auth: "key",
        params: responseId,
        detail: {
          summary: "Stop a background response, on whichever node generates it; the response once it has ended (cancelled, with what was said)",
          tags: TAGS,
          responses: {
            "200": jsonResponse("The response", "ResponseObject"),
            ...openAiErrorResponses("invalid_input", "unauthorized", "rate_limited"),
            ...NOT_FOUND,
          },
        },
      },
    )
    .delete(
      "/v1/responses/:id",
      async ({ params, principal }) => {
        await deps.responses.delete(principal.userId, params.id);
        return { id: params.id, object: "response" as const, deleted: true as const };
      },
      {
        auth: "key",
        params: responseId,
        detail: {
          summary: "Delete a kept response and what the engine cached of its chain; responses that continued it stay, their history ending there",
          tags: TAGS,
          responses: { "200": jsonResponse("Deleted", "DeletedResponse"), ...openAiErrorResponses("unauthorized", "rate_limited"), ...NOT_FOUND },
        },
      },
    )
    .get(
      "/v1/responses/:id/input_items",
      async ({ params, principal, query }) => inputItemList(await deps.responses.inputItems(principal.userId, params.id, itemPageOf(query))),
      {
        auth: "key",
        params: responseId,
        query: ITEM_PAGE_QUERY,
        detail: {
          summary: "The items a kept response was given, paged (newest first unless order=asc)",
          tags: TAGS,
          responses: {
            "200": jsonResponse("One page of items", "InputItemList"),
            ...openAiErrorResponses("invalid_input", "unauthorized", "rate_limited"),
            ...NOT_FOUND,
          },
        },
      },
    );
