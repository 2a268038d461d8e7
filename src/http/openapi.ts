/**
 * The response side of the OpenAPI document, from the contract's schemas (src/http/contract.ts)
 * and the error table (src/http/errors.ts). Routes attach it through `detail.responses` rather
 * than Elysia's `response` option, which would check (and copy) every response at run time, a
 * large share of a listing request's time in-process. The contract test checks real responses
 * against this document instead (test/http/contract.test.ts).
 */
import type { DocumentDecoration } from "elysia";
import type { ErrorKind } from "../errors";
import { AnthropicErrorBody, AnthropicMessage, AnthropicModel, AnthropicModelList, TokenCount } from "./anthropic/contract";
import {
  ChatDelta,
  ChatReasoning,
  ChatReply,
  ChatStart,
  ChatToolCall,
  ChatToolCallStart,
  ConversationPage,
  ErrorBody,
  Health,
  MessagePage,
  QuotaEntryJson,
  QuotaList,
  Ready,
  UsageReport,
} from "./contract";
import { HTTP_ERRORS } from "./errors";
import { InfillChunk, InfillResponse } from "./infill/contract";
import {
  OllamaChatResponse,
  OllamaEmbeddingsResponse,
  OllamaEmbedResponse,
  OllamaErrorBody,
  OllamaGenerateResponse,
  OllamaModelList,
  OllamaShowResponse,
  OllamaVersion,
} from "./ollama/contract";
import { ChatCompletion, ChatCompletionChunk, OpenAiEmbeddingList, OpenAiErrorBody, OpenAiModel, OpenAiModelList, TextCompletion } from "./openai/contract";
import { ConversationObject, DeletedConversation, DeletedResponse, InputItem, InputItemList, ResponseEvent, ResponseObject } from "./openai/responses-contract";
import { RerankResponse } from "./rerank/contract";

/** Named in `components.schemas`, so responses refer to them instead of repeating them. */
export const SCHEMAS = {
  Error: ErrorBody,
  ChatReply,
  ChatStart,
  ChatDelta,
  ChatReasoning,
  ChatToolCallStart,
  ChatToolCall,
  MessagePage,
  ConversationPage,
  UsageReport,
  QuotaList,
  QuotaEntry: QuotaEntryJson,
  Health,
  Ready,
  OpenAiError: OpenAiErrorBody,
  ChatCompletion,
  ChatCompletionChunk,
  OpenAiModel,
  OpenAiModelList,
  OpenAiEmbeddingList,
  RerankResponse,
  TextCompletion,
  InfillResponse,
  InfillChunk,
  ResponseObject,
  ResponseEvent,
  InputItemList,
  InputItem,
  DeletedResponse,
  ConversationObject,
  DeletedConversation,
  AnthropicMessage,
  AnthropicError: AnthropicErrorBody,
  TokenCount,
  AnthropicModel,
  AnthropicModelList,
  OllamaChatResponse,
  OllamaGenerateResponse,
  OllamaModelList,
  OllamaShowResponse,
  OllamaVersion,
  OllamaEmbedResponse,
  OllamaEmbeddingsResponse,
  OllamaError: OllamaErrorBody,
};

const ref = (name: keyof typeof SCHEMAS) => ({ $ref: `#/components/schemas/${name}` });

type Responses = NonNullable<DocumentDecoration["responses"]>;

export const jsonResponse = (description: string, schema: keyof typeof SCHEMAS) => ({ description, content: { "application/json": { schema: ref(schema) } } });

/** A body of one schema or the other: a route both OpenAI's and Anthropic's clients call. */
export const either = (description: string, one: keyof typeof SCHEMAS, other: keyof typeof SCHEMAS) => ({
  description,
  content: { "application/json": { schema: { oneOf: [ref(one), ref(other)] } } },
});

/** A response that is a document of its own media type (a page, Prometheus' text), not one of Parley's bodies. */
export const documentResponse = (description: string, mediaType: string) => ({
  description,
  content: { [mediaType]: { schema: { type: "string" as const } } },
});

/**
 * The error responses a route can give (and always 500), each narrowed to its status's code, so
 * a body with the wrong code for its status does not match; kinds that share a status (429's two)
 * share its entry.
 */
export function errorResponses(...kinds: ErrorKind[]): Responses {
  const byStatus = new Map<number, { codes: string[]; descriptions: string[] }>();
  for (const kind of [...kinds, "internal" as const]) {
    const { status, code, when } = HTTP_ERRORS[kind];
    const entry = byStatus.get(status) ?? { codes: [], descriptions: [] };
    entry.codes.push(code);
    entry.descriptions.push(`${code}: ${when}`);
    byStatus.set(status, entry);
  }
  return Object.fromEntries(
    [...byStatus].map(([status, { codes, descriptions }]) => {
      const code = codes.length === 1 ? { const: codes[0] } : { enum: codes };
      const schema = { allOf: [ref("Error"), { type: "object", properties: { error: { type: "object", properties: { code } } } }] };
      return [String(status), { description: descriptions.join("; "), content: { "application/json": { schema } } }];
    }),
  ) as Responses;
}

/**
 * The errors of a route of another protocol, in its shape (the schema `body`) and the statuses
 * compatible APIs answer with (several kinds can share a status there: 400), each narrowed to
 * the `error.type`s its status can carry where the shape has one (`typeOf`).
 */
function protocolErrorResponses(
  body: "OpenAiError" | "AnthropicError" | "OllamaError",
  typeOf: ((kind: ErrorKind) => string) | undefined,
  kinds: ErrorKind[],
): Responses {
  const byStatus = new Map<number, ErrorKind[]>();
  for (const kind of [...kinds, "internal" as const]) {
    const { status, openai } = HTTP_ERRORS[kind];
    const wire = openai.status ?? status;
    byStatus.set(wire, [...(byStatus.get(wire) ?? []), kind]);
  }
  return Object.fromEntries(
    [...byStatus].map(([status, shared]) => {
      const types = typeOf && [...new Set(shared.map(typeOf))];
      const schema = types
        ? { allOf: [ref(body), { type: "object", properties: { error: { type: "object", properties: { type: { enum: types } } } } }] }
        : ref(body);
      const description = shared.map((kind) => `${HTTP_ERRORS[kind].code}: ${HTTP_ERRORS[kind].when}`).join("; ");
      return [String(status), { description, content: { "application/json": { schema } } }];
    }),
  ) as Responses;
}

/** The errors of an OpenAI-compatible route, in OpenAI's shape. */
export const openAiErrorResponses = (...kinds: ErrorKind[]) => protocolErrorResponses("OpenAiError", (kind) => HTTP_ERRORS[kind].openai.type, kinds);

/** The errors of an Anthropic-compatible route, in Anthropic's shape. */
export const anthropicErrorResponses = (...kinds: ErrorKind[]) => protocolErrorResponses("AnthropicError", (kind) => HTTP_ERRORS[kind].anthropic, kinds);

/** What a generating route's request can be refused for, whatever its protocol, the quota aside (a token count generates nothing). */
export const TURN_REFUSALS = [
  "invalid_json",
  "invalid_input",
  "unauthorized",
  "payload_too_large",
  "unsupported_media_type",
  "model_not_found",
  "rate_limited",
  "overloaded",
] as const satisfies readonly ErrorKind[];

/** What a retrieval route's request (embeddings, reranking) can be refused for, whatever its protocol. */
export const RETRIEVAL_REFUSALS = [...TURN_REFUSALS, "quota_exceeded"] as const satisfies readonly ErrorKind[];

/** The errors of an Ollama-compatible route, in Ollama's shape (one message, no type). */
export const ollamaErrorResponses = (...kinds: ErrorKind[]) => protocolErrorResponses("OllamaError", undefined, kinds);

const NDJSON =
  "Unless `stream: false`: `application/x-ndjson`, one JSON object a line, each of this schema; the last, alone, `done: true` with the counts. An error after the first line is a line `{error}`.";

/** A generating route's 200: one object, or a stream of them, one a line. */
export const ndjsonResponse = (description: string, schema: "OllamaChatResponse" | "OllamaGenerateResponse") => ({
  description: `${description}. ${NDJSON}`,
  content: { "application/json": { schema: ref(schema) }, "application/x-ndjson": { schema: ref(schema) } },
});

/** The errors of a route both OpenAI's and Anthropic's clients call, in the shape of whichever asked. */
export function eitherErrorResponses(...kinds: ErrorKind[]): Responses {
  const [openai, anthropic] = [openAiErrorResponses(...kinds), anthropicErrorResponses(...kinds)] as Record<
    string,
    { description: string; content: { "application/json": { schema: object } } }
  >[];
  return Object.fromEntries(
    Object.entries(openai!).map(([status, response]) => [
      status,
      {
        description: response.description,
        content: {
          "application/json": { schema: { oneOf: [response.content["application/json"].schema, anthropic![status]!.content["application/json"].schema] } },
        },
      },
    ]),
  ) as Responses;
}

const COMPLETION_SSE = [
  "With `stream: true`: `text/event-stream` of unnamed events, each `data` one `chat.completion.chunk`:",
  "the role first, then a reasoning model's thought as reasoning_content deltas, then content deltas, then one",
  "with finish_reason; with stream_options.include_usage a",
  "last chunk with `choices: []` and the usage; then `data: [DONE]`. An error after the first byte is",
  "`data: {error}`. Comment lines `: ping` keep an idle stream alive.",
].join(" ");

/** The completion's 200: a `chat.completion`, or a stream of chunks. */
export const chatCompletionResponse = {
  description: `The completion (nothing is stored). ${COMPLETION_SSE}`,
  content: {
    "application/json": { schema: ref("ChatCompletion") },
    "text/event-stream": { schema: { type: "string" as const, description: COMPLETION_SSE }, "x-events": { message: ref("ChatCompletionChunk") } },
  },
};

const TEXT_COMPLETION_SSE = [
  "With `stream: true`: `text/event-stream` of unnamed events, each `data` one `text_completion` chunk:",
  "the echoed prompt first (with echo), then the text as it comes, the log-probabilities asked for in chunks of their own",
  '(text ""), one with finish_reason; with stream_options.include_usage a last chunk with `choices: []` and the usage;',
  "then `data: [DONE]`. An error after the first byte is `data: {error}`. Comment lines `: ping` keep an idle stream alive.",
].join(" ");

const INFILL_SSE = [
  "With `stream: true`: `text/event-stream` of unnamed events, each `data` one piece of the text (`stop: false`),",
  "then the last with `stop: true`, empty `content`, the counts and timings; no `[DONE]`. With `response_fields`, the",
  "answer (the last event) holds only the values at those paths, each under its path. An error after the first byte is `data: {error}`.",
].join(" ");

/** llama-server's `/infill` 200: its completion, or a stream of its pieces. */
export const infillResponse = {
  description: `The completion (nothing is stored). ${INFILL_SSE}`,
  content: {
    "application/json": { schema: ref("InfillResponse") },
    "text/event-stream": { schema: { type: "string" as const, description: INFILL_SSE }, "x-events": { message: ref("InfillChunk") } },
  },
};

/** The legacy completion's 200: a `text_completion`, or a stream of them. */
export const textCompletionResponse = {
  description: `The completion (nothing is stored). ${TEXT_COMPLETION_SSE}`,
  content: {
    "application/json": { schema: ref("TextCompletion") },
    "text/event-stream": { schema: { type: "string" as const, description: TEXT_COMPLETION_SSE }, "x-events": { message: ref("TextCompletion") } },
  },
};

export const SSE_DESCRIPTION = [
  "With `stream: true`: `text/event-stream`. Events, each `data` one line of JSON:",
  "`start` {conversation_id, new_conversation, user_message, model};",
  "`reasoning` {content} (a reasoning model's thought, before the first delta; all concatenated are the final message.reasoning);",
  "`delta` {content} (all deltas concatenated are the final message.content);",
  "with `tools`, `tool_call` {id, server, name, arguments} as the model has written a call of a server's tool, and `tool_result` (the call with its output or error) once made;",
  "`done` (the same object as the non-streamed response);",
  "`error` {error} (generation failed after the stream began; the stream ends).",
  "Comment lines `: ping` keep an idle stream alive.",
].join(" ");

/**
 * The chat's 200: a JSON reply, or a stream. OpenAPI 3.1 cannot describe an event stream's
 * items, so the schema of each event's `data` is given by event name in the extension `x-events`.
 */
export const chatReplyResponse = {
  description: `The stored reply. ${SSE_DESCRIPTION}`,
  content: {
    "application/json": { schema: ref("ChatReply") },
    "text/event-stream": {
      schema: { type: "string" as const, description: SSE_DESCRIPTION },
      "x-events": {
        start: ref("ChatStart"),
        reasoning: ref("ChatReasoning"),
        delta: ref("ChatDelta"),
        tool_call: ref("ChatToolCallStart"),
        tool_result: ref("ChatToolCall"),
        done: ref("ChatReply"),
        error: ref("Error"),
      },
    },
  },
};
