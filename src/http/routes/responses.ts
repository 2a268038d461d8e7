/**
 * OpenAI's Responses API (`POST /v1/responses`) over the same turn as chat completions: a third
 * framing of it. Input items become the history, the output its items. Nothing is kept yet:
 * `store` must be false, and what needs a kept response (`previous_response_id`, `conversation`,
 * `background`) is refused, as is every field Parley cannot honour (docs/API.md, "Responses").
 */
import { Elysia, t } from "elysia";
import type { CompletionInput, CompletionService } from "../../chat/completions";
import { InvalidInput } from "../../errors";
import type { ReplyFormat, ToolCall, Turn } from "../../llm/engine";
import { requireKey } from "../auth";
import { type BodyLimits, jsonBody } from "../json-body";
import { jsonResponse, openAiErrorResponses } from "../openapi";
import { newResponse, type ResponseEcho, responseJson, responsesFraming } from "../openai/responses-present";
import { callsOf, toolRequestOf } from "../openai/tools";
import { optional, unsupported } from "../sampling-fields";
import type { TurnDriver } from "../turn-driver";


const ITEM_RULE =
  'input must be a string or items: messages {role: user, system, developer or assistant, content: a string or [{type: "input_text" or "output_text", text}]}, function_call {call_id, name, arguments}, function_call_output {call_id, output}, reasoning {summary, content}';

const seen = { id: t.Optional(t.String()), status: t.Optional(t.String()) };

const item = t.Union(
  [
    t.Object({
      type: t.Optional(t.Literal("message")),
      role: t.Union([t.Literal("user"), t.Literal("system"), t.Literal("developer"), t.Literal("assistant")]),
      content: t.Union([t.String(), t.Array(t.Object({ type: t.Union([t.Literal("input_text"), t.Literal("output_text")]), text: t.String() }))]),
      ...seen,
    }),
    t.Object({ type: t.Literal("function_call"), call_id: t.String({ minLength: 1 }), name: t.String(), arguments: t.String(), ...seen }),
    t.Object({ type: t.Literal("function_call_output"), call_id: t.String(), output: t.String(), ...seen }),
    t.Object({ type: t.Literal("reasoning"), summary: t.Array(t.Unknown()), content: t.Optional(t.Array(t.Object({ type: t.Literal("reasoning_text"), text: t.String() }))), ...seen }),
  ],
  { error: ITEM_RULE },
);

const TOOL_RULE = 'each tool must be {type: "function", name, description?, parameters?, strict?}, its name of letters, digits, _ and - (at most 64)';

const responseRequest = t.Object(
  {
    input: t.Union([t.String(), t.Array(item, { minItems: 1 })], { error: ITEM_RULE }),
    model: optional(t.String(), "model must be a string"),
    instructions: optional(t.String(), "instructions must be a string"),
    // OpenAI's default is true: a request must say false, or its response would be one it expects kept.
    store: t.Literal(false, { error: "store must be false: Parley keeps no response yet (send store: false; previous_response_id and conversations come with kept responses)" }),
    stream: optional(t.Boolean(), "stream must be true or false"),
    temperature: optional(t.Number({ minimum: 0, maximum: 2 }), "temperature must be a number from 0 to 2"),
    top_p: optional(t.Number({ exclusiveMinimum: 0, maximum: 1 }), "top_p must be a number above 0, at most 1"),
    max_output_tokens: optional(t.Integer({ minimum: 1 }), "max_output_tokens must be a positive integer"),
    tools: optional(
      t.Array(
        t.Object(
          {
            type: t.Literal("function"),
            name: t.String({ pattern: "^[a-zA-Z0-9_-]{1,64}$" }),
            description: optional(t.String(), TOOL_RULE),
            parameters: optional(t.Record(t.String(), t.Unknown()), TOOL_RULE),
            // Parley holds every call it forces to the schema, strict or not.
            strict: optional(t.Boolean(), TOOL_RULE),
          },
          { error: TOOL_RULE },
        ),
        { maxItems: 128 },
      ),
      `tools must be an array of up to 128; ${TOOL_RULE}`,
    ),
    tool_choice: optional(
      t.Union([t.Literal("none"), t.Literal("auto"), t.Literal("required"), t.Object({ type: t.Literal("function"), name: t.String() })]),
      'tool_choice must be "none", "auto", "required" or {type: "function", name}',
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
    previous_response_id: unsupported("previous_response_id needs kept responses, which Parley does not keep yet"),
    conversation: unsupported("conversation needs kept responses, which Parley does not keep yet"),
    background: optional(t.Literal(false), "background needs kept responses, which Parley does not keep yet"),
    include: optional(t.Array(t.Never(), { maxItems: 0 }), "include is not supported"),
    reasoning: unsupported("reasoning is not supported: the model's chat template decides how it reasons"),
    top_logprobs: unsupported("top_logprobs is not supported on /v1/responses yet (it is on /v1/chat/completions)"),
    max_tool_calls: unsupported("max_tool_calls is not supported"),
    prompt: unsupported("prompt templates are not supported"),
    stream_options: unsupported("stream_options is not supported"),
  },
  { additionalProperties: t.Never({ error: "unknown field (param names it): Parley refuses a field it does not know rather than ignore it" }) },
);

type ResponseRequest = typeof responseRequest.static;
type Item = Exclude<ResponseRequest["input"], string>[number];

/**
 * The history: `instructions` first, then the items. A function call joins the assistant turn
 * before it (or makes one); its output answers a call made before it; a reasoning item is the
 * thought of the assistant turn that follows.
 */
function turnsOf(instructions: string | null | undefined, input: string | readonly Item[]): Turn[] {
  const turns: Turn[] = instructions ? [{ role: "system", content: instructions }] : [];
  if (typeof input === "string") return [...turns, { role: "user", content: input }];
  const calls = new Set<string>();
  let thought: string | undefined;
  for (const [i, entry] of input.entries()) {
    const at = `input[${i}]`;
    const last = turns.at(-1);
    switch (entry.type) {
      case "function_call": {
        const [call] = callsOf([{ id: entry.call_id, function: { name: entry.name, arguments: entry.arguments } }], at) as [ToolCall];
        calls.add(call.id);
        if (last?.role === "assistant" && thought === undefined) last.toolCalls = [...(last.toolCalls ?? []), call];
        else turns.push({ role: "assistant", content: "", ...takeThought(), toolCalls: [call] });
        break;
      }
      case "function_call_output":
        if (!calls.has(entry.call_id)) throw new InvalidInput(`${at}.call_id`, `a function_call_output must answer an earlier function_call (${JSON.stringify(entry.call_id)} answers none)`);
        turns.push({ role: "tool", content: entry.output, toolCallId: entry.call_id });
        break;
      case "reasoning":
        thought = (thought ?? "") + (entry.content ?? []).map((part) => part.text).join("");
        break;
      default: {
        const content = typeof entry.content === "string" ? entry.content : entry.content.map((part) => part.text).join("");
        if (!content.isWellFormed()) throw new InvalidInput(at, "input must be valid Unicode text (one has a lone surrogate)");
        if (entry.role === "assistant") turns.push({ role: "assistant", content, ...takeThought() });
        else turns.push({ role: entry.role === "developer" ? "system" : entry.role, content });
      }
    }
  }
  return turns;

  function takeThought(): { reasoning?: string } {
    const taken = thought ? { reasoning: thought } : {};
    thought = undefined;
    return taken;
  }
}

function formatOf(format: NonNullable<ResponseRequest["text"]>["format"]): ReplyFormat | undefined {
  if (!format || format.type === "text") return undefined;
  return format.type === "json_object" ? { type: "json_object" } : { type: "json_schema", schema: format.schema };
}

function responseInput(body: ResponseRequest): { input: Omit<CompletionInput, "signal" | "userId">; echo: ResponseEcho } {
  const tools = toolRequestOf({
    functions: body.tools ?? [],
    choice: typeof body.tool_choice === "object" && body.tool_choice !== null ? { name: body.tool_choice.name } : (body.tool_choice ?? undefined),
    parallel: body.parallel_tool_calls,
    nameParam: (i) => `tools[${i}].name`,
  });
  const format = formatOf(body.text?.format);
  const temperature = body.temperature ?? 1;
  return {
    input: {
      messages: turnsOf(body.instructions, body.input),
      sampling: { temperature, topP: body.top_p ?? undefined },
      maxTokens: body.max_output_tokens ?? undefined,
      ...(format ? { format } : {}),
      ...(tools ? { tools } : {}),
    },
    echo: {
      instructions: body.instructions ?? null,
      max_output_tokens: body.max_output_tokens ?? null,
      temperature,
      top_p: body.top_p ?? null,
      text: { format: body.text?.format ?? { type: "text" } },
      tool_choice: body.tool_choice ?? (tools ? "auto" : "none"),
      tools: (body.tools ?? []) as Record<string, unknown>[],
      parallel_tool_calls: body.parallel_tool_calls ?? true,
      metadata: body.metadata ?? {},
    },
  };
}

/**
 * The engine names fields as chat completions spell them; a refusal of a Responses request names
 * them as Responses does (`text.format`, `tools[i].parameters`).
 */
const RENAMED: readonly [RegExp, string][] = [
  [/^response_format\b/, "text.format"],
  [/^tools\[(\d+)\]\.function\./, "tools[$1]."],
];

function renamed(error: unknown): unknown {
  if (!(error instanceof InvalidInput)) return error;
  const param = RENAMED.reduce((name, [from, to]) => name.replace(from, to), error.param);
  if (param === error.param) return error;
  const message = RENAMED.reduce((text, [from, to]) => text.replace(new RegExp(from.source.slice(1)), to), error.message);
  return new InvalidInput(param, message);
}

/** The turn's events, a refusal naming the fields as Responses does. */
async function* namedAsResponses<T, R>(events: AsyncGenerator<T, R, void>): AsyncGenerator<T, R, void> {
  try {
    return yield* events;
  } catch (error) {
    throw renamed(error);
  }
}

export interface ResponsesRouteDeps {
  completions: CompletionService;
  turns: TurnDriver;
  body: BodyLimits;
}

export const responsesRoutes = (deps: ResponsesRouteDeps) =>
  new Elysia({ name: "parley/routes/responses" }).use(requireKey).post(
    "/v1/responses",
    async function* ({ body, principal, request, server, set }) {
      const { input, echo } = responseInput(body);
      const turn = (signal: AbortSignal) => namedAsResponses(deps.completions.complete({ ...input, userId: principal.userId, signal }));
      const identity = newResponse();
      if (body.stream !== true) {
        const result = await deps.turns.complete(request, turn);
        return result && responseJson(identity, echo, result);
      }
      yield* deps.turns.stream({ request, set, server, keyId: principal.keyId }, turn, responsesFraming(identity, echo));
    },
    {
      auth: "key",
      body: responseRequest,
      parse: jsonBody(deps.body),
      detail: {
        summary: "OpenAI-compatible Responses (not kept: store must be false; JSON, or OpenAI's typed events with stream: true)",
        tags: ["OpenAI-compatible"],
        responses: {
          "200": jsonResponse("The response; with stream: true, text/event-stream of OpenAI's typed events (ResponseEvent), the last response.completed or response.incomplete", "ResponseObject"),
          ...openAiErrorResponses("invalid_json", "invalid_input", "unauthorized", "payload_too_large", "unsupported_media_type", "rate_limited", "overloaded"),
        },
      },
    },
  );
