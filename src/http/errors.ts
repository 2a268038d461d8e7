import { Elysia } from "elysia";
import { type DomainError, type ErrorKind, Internal, InvalidInput, InvalidJson, ParleyError } from "../errors";
import type { Logger } from "../log";
import type { AnthropicErrorBody, AnthropicErrorType } from "./anthropic/contract";
import type { ErrorBody, ErrorCode } from "./contract";
import { spelled } from "./field-names";
import type { OpenAiErrorBody } from "./openai/contract";
import { quotaHeaders, tokenQuotaHeaders } from "./rate-limit";
import { contextOf } from "./request-context";
import { noSuchEndpoint } from "./routing";

type HeaderMap = Record<string, string>;

/** OpenAI's error `type`s, which its SDKs pair with the status to pick a typed error. */
export type OpenAiErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "rate_limit_error"
  | "insufficient_quota"
  | "server_error";

interface WireError<E> {
  status: number;
  code: ErrorCode;
  /** When a client sees it, for the OpenAPI document. */
  when: string;
  headers?: (error: E) => HeaderMap;
  /** The OpenAI-compatible API's type, and its status and code where they differ. */
  openai: { type: OpenAiErrorType; status?: number; code?: string };
  /**
   * Anthropic's type, for its Messages API, at the OpenAI-compatible API's status (503 included:
   * Anthropic's own overload is 529, which no other client of Parley knows; its SDK retries both).
   */
  anthropic: AnthropicErrorType;
}

const retryAfter = (ms: number): HeaderMap => ({ "retry-after": String(Math.max(1, Math.ceil(ms / 1000))) });

/**
 * The contract's error table (api-v1.md, "Errors"): how each kind of domain error goes on the
 * wire. The only place that knows statuses and error headers; the OpenAPI document and the
 * tests read it too.
 */
export const HTTP_ERRORS: { [K in ErrorKind]: WireError<Extract<DomainError, { kind: K }>> } = {
  bad_request: {
    status: 400,
    code: "bad_request",
    when: "The request is not valid HTTP for Parley (e.g. an invalid Host header)",
    openai: { type: "invalid_request_error" },
    anthropic: "invalid_request_error",
  },
  invalid_json: {
    status: 400,
    code: "invalid_json",
    when: "The body is not valid JSON",
    openai: { type: "invalid_request_error" },
    anthropic: "invalid_request_error",
  },
  unauthorized: {
    status: 401,
    code: "unauthorized",
    when: "Missing, malformed, unknown or revoked key (WWW-Authenticate: Bearer)",
    // RFC 6750: `invalid_token` only when a token was presented.
    headers: (error) => ({ "www-authenticate": error.tokenSent ? 'Bearer realm="parley", error="invalid_token"' : 'Bearer realm="parley"' }),
    openai: { type: "authentication_error" },
    anthropic: "authentication_error",
  },
  forbidden: {
    status: 403,
    code: "forbidden",
    when: "The key's role does not allow it (a user key asked for another user's messages)",
    openai: { type: "permission_error" },
    anthropic: "permission_error",
  },
  not_found: {
    status: 404,
    code: "not_found",
    when: "Unknown path, or no such resource of the caller's",
    openai: { type: "not_found_error" },
    anthropic: "not_found_error",
  },
  model_not_found: {
    status: 404,
    code: "model_not_found",
    when: "The request names a model the service does not have (with several models; with one, any name is that model)",
    // OpenAI's answer to an unknown model, which its SDKs' users look for.
    openai: { type: "invalid_request_error", code: "model_not_found" },
    anthropic: "not_found_error",
  },
  method_not_allowed: {
    status: 405,
    code: "method_not_allowed",
    when: "Known path, wrong method (see Allow)",
    headers: (error) => ({ allow: error.allowed.join(", ") }),
    openai: { type: "invalid_request_error" },
    anthropic: "invalid_request_error",
  },
  request_timeout: {
    status: 408,
    code: "request_timeout",
    when: "The body did not arrive in time; the connection is closed",
    headers: () => ({ connection: "close" }),
    openai: { type: "invalid_request_error" },
    anthropic: "invalid_request_error",
  },
  payload_too_large: {
    status: 413,
    code: "payload_too_large",
    when: "Body over the size limit",
    openai: { type: "invalid_request_error" },
    anthropic: "request_too_large",
  },
  unsupported_media_type: {
    status: 415,
    code: "unsupported_media_type",
    when: "Body is not application/json",
    openai: { type: "invalid_request_error" },
    anthropic: "invalid_request_error",
  },
  invalid_input: {
    status: 422,
    code: "invalid_request",
    when: "A field or parameter is missing, of the wrong type or out of range; param names it",
    // OpenAI answers every invalid request with 400, and its SDKs expect it.
    openai: { type: "invalid_request_error", status: 400 },
    anthropic: "invalid_request_error",
  },
  rate_limited: {
    status: 429,
    code: "rate_limited",
    when: "Per-key rate limit or stream cap hit (Retry-After)",
    headers: (error) => ({ ...(error.quota && quotaHeaders(error.quota)), ...retryAfter(error.retryAfterMs) }),
    openai: { type: "rate_limit_error" },
    anthropic: "rate_limit_error",
  },
  quota_exceeded: {
    status: 429,
    code: "quota_exceeded",
    when: "The user's token quota for the period is spent, or too little is left for the prompt (Retry-After, X-Quota-*)",
    headers: (error) => ({ ...tokenQuotaHeaders(error.quota), ...retryAfter(error.retryAfterMs) }),
    // OpenAI's own answer to a spent quota, which clients (and its SDKs' users) look for.
    openai: { type: "insufficient_quota", code: "insufficient_quota" },
    anthropic: "rate_limit_error",
  },
  overloaded: {
    status: 503,
    code: "overloaded",
    when: "Model loading, shutting down, or queue full (Retry-After)",
    headers: (error) => retryAfter(error.retryAfterMs),
    openai: { type: "server_error" },
    anthropic: "overloaded_error",
  },
  dependency_failed: {
    status: 424,
    code: "dependency_failed",
    when: "A listed MCP server the request's tools name could not be reached, or refused to list its tools",
    // OpenAI answers a tool server it cannot reach with 424 too.
    openai: { type: "server_error" },
    anthropic: "api_error",
  },
  internal: {
    status: 500,
    code: "internal",
    when: "Unexpected failure; details only in the server log",
    openai: { type: "server_error" },
    anthropic: "api_error",
  },
};

/** Which shape an error takes: the contract's, OpenAI's for its compatible API, Anthropic's for its Messages API, or Ollama's. */
export type ErrorDialect = "parley" | "openai" | "anthropic" | "ollama";

/** Requests under this prefix are OpenAI's API: its errors take OpenAI's shape, so its SDKs raise their typed errors. */
export const OPENAI_PREFIX = "/v1/";
/** Anthropic's Messages API, within the same prefix. */
const ANTHROPIC_PREFIX = "/v1/messages";
/** The model listing both APIs share: Anthropic's when its client says so (`anthropic-version`), as its SDK does. */
const MODELS_PREFIX = "/v1/models";

/** llama-server's other path of `/v1/rerank`: errors in the same shape. */
const RERANK_PATH = "/rerank";
/** llama-server's code completion: its errors are in OpenAI's shape too. */
const INFILL_PATH = "/infill";

const under = (path: string, prefix: string) => path === prefix || path.startsWith(`${prefix}/`);

/** Ollama's API: its routes sit beside the native API's `/api/v1.0/`, each by its own name. */
export const OLLAMA_ROUTES = [
  "chat",
  "generate",
  "tags",
  "show",
  "ps",
  "version",
  "embed",
  "embeddings",
  "pull",
  "push",
  "create",
  "copy",
  "delete",
  "blobs",
].map((name) => `/api/${name}`);

/** A request of Anthropic's clients, which always send their API's version. */
export const fromAnthropicClient = (headers: Headers): boolean => headers.has("anthropic-version");

export const dialectOf = (path: string, headers: Headers): ErrorDialect =>
  under(path, ANTHROPIC_PREFIX) || (under(path, MODELS_PREFIX) && fromAnthropicClient(headers))
    ? "anthropic"
    : path.startsWith(OPENAI_PREFIX) || path === RERANK_PATH || path === INFILL_PATH
      ? "openai"
      : OLLAMA_ROUTES.some((route) => under(path, route))
        ? "ollama"
        : "parley";

/** The status, contract code and headers `error` is answered with. */
export function wireError(error: DomainError, dialect: ErrorDialect = "parley"): { status: number; code: ErrorCode; headers: HeaderMap } {
  // One kind, one entry: the cast only forgoes correlating the two unions.
  const entry = HTTP_ERRORS[error.kind] as WireError<DomainError>;
  const status = dialect === "parley" ? entry.status : (entry.openai.status ?? entry.status);
  return { status, code: entry.code, headers: entry.headers?.(error) ?? {} };
}

export const errorBody = (error: DomainError, requestId: string): ErrorBody => ({
  error: {
    code: HTTP_ERRORS[error.kind].code,
    message: error.message,
    ...("param" in error && error.param !== undefined ? { param: error.param } : {}),
    request_id: requestId,
  },
});

/** OpenAI's error body; `code` is the contract's code, `param` the field at fault or null. */
export const openAiErrorBody = (error: DomainError): OpenAiErrorBody => ({
  error: {
    message: error.message,
    type: HTTP_ERRORS[error.kind].openai.type,
    param: "param" in error && error.param !== undefined ? error.param : null,
    code: HTTP_ERRORS[error.kind].openai.code ?? HTTP_ERRORS[error.kind].code,
  },
});

/** Anthropic's error body, which has no field for the parameter at fault: the message leads with it. */
export const anthropicErrorBody = (error: DomainError): AnthropicErrorBody => ({
  type: "error",
  error: {
    type: HTTP_ERRORS[error.kind].anthropic,
    message: "param" in error && error.param !== undefined ? `${error.param}: ${error.message}` : error.message,
  },
});

/**
 * Ollama's error body: one message, which leads with the field at fault, once. A rule that
 * already begins with its field (a schema's own text: "options.top_k must be…", "raw: …") is
 * led by the field it names, the deeper one where it names one.
 */
export const ollamaErrorBody = (error: DomainError) => ({
  error: "param" in error && error.param !== undefined ? ledByField(error.param, error.message) : error.message,
});

function ledByField(param: string, message: string): string {
  if (!message.startsWith(param)) return `${param}: ${message}`;
  const named = /^([^\s:]*)(?::\s*|\s+)/.exec(message.slice(param.length));
  const deeper = named?.[1];
  if (named === null || (deeper !== "" && !/^[.[]/.test(deeper!))) return `${param}: ${message}`;
  return `${param}${deeper}: ${message.slice(param.length + named[0].length)}`;
}

/** Each dialect's error body; only the contract's carries the request id (the others have no field for it). */
const ERROR_BODIES: Record<ErrorDialect, (error: DomainError, requestId: string) => object> = {
  parley: errorBody,
  openai: openAiErrorBody,
  anthropic: anthropicErrorBody,
  ollama: ollamaErrorBody,
};

export const JSON_CONTENT_TYPE = "application/json; charset=utf-8";

/** `headers` are what the request already earned (request id, rate-limit state); the error's own win. */
export function errorResponse(error: DomainError, requestId: string, headers: HeaderMap = {}, dialect: ErrorDialect = "parley"): Response {
  const wire = wireError(error, dialect);
  const body = ERROR_BODIES[dialect](error, requestId);
  return new Response(JSON.stringify(body), {
    status: wire.status,
    headers: { ...headers, "content-type": JSON_CONTENT_TYPE, "x-request-id": requestId, ...wire.headers },
  });
}

interface SchemaWithMessage {
  error?: unknown;
}

/**
 * Turns Elysia's validation error into ours without its `found`/`expected` fields, which
 * echo the request. The schema's own `error` text is preferred: it states the rule.
 */
function fromValidation(error: { valueError?: { path: string; message: string; schema: unknown; value: unknown } }): InvalidInput {
  const issue = error.valueError;
  const param = issue?.path.split("/").filter(Boolean)[0] ?? "body";
  if (!issue || issue.path === "") return new InvalidInput(param, "the request body must be a JSON object");
  if (issue.value === undefined) return new InvalidInput(param, `${param} is required`);
  const stated = (issue.schema as SchemaWithMessage).error;
  return new InvalidInput(param, typeof stated === "string" ? stated : `${param} is invalid: ${issue.message.toLowerCase()}`);
}

/** What a request's log line says of its refusal: the code, and the field at fault as the client named it. */
export const refusalOf = (error: DomainError): { code: string; param?: string } => ({
  code: HTTP_ERRORS[error.kind].code,
  ...("param" in error && error.param !== undefined ? { param: error.param } : {}),
});

/** Maps any failure, ours or Elysia's, to a domain error; unknown ones become `internal`. */
export function toDomainError(code: unknown, error: unknown): DomainError {
  // Every ParleyError subclass is a member of DomainError (src/errors.ts).
  if (error instanceof ParleyError) return error as DomainError;
  switch (code) {
    case "VALIDATION":
      return fromValidation(error as Parameters<typeof fromValidation>[0]);
    case "PARSE": {
      // A throw inside a `parse` hook arrives wrapped: the real reason is its cause.
      const cause = (error as { cause?: unknown }).cause;
      return cause instanceof ParleyError ? (cause as DomainError) : new InvalidJson();
    }
    case "NOT_FOUND":
      return noSuchEndpoint();
    default:
      return new Internal(error);
  }
}

/** The one place where failures become responses; only unexpected ones are logged, with detail. */
export const errorHandler = (log: Logger) =>
  new Elysia({ name: "parley/errors" }).onError({ as: "global" }, ({ code, error, request, set }) => {
    const context = contextOf(request);
    const domainError = spelled(toDomainError(code, error), context.fields);
    if (domainError.kind === "quota_exceeded") context.quota = "quota_exceeded";
    if (domainError.kind === "internal") log.error({ request_id: context.id, err: error }, "unhandled error");
    const response = errorResponse(domainError, context.id, set.headers as HeaderMap, dialectOf(context.path, request.headers));
    context.status = response.status;
    context.refusal = refusalOf(domainError);
    return response;
  });
