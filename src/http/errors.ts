import { Elysia } from "elysia";
import { AppError } from "../errors";
import type { Logger } from "../log";
import { contextOf } from "./request-context";

export interface ErrorBody {
  error: { code: string; message: string; param?: string; request_id: string };
}

export const errorBody = (error: AppError, requestId: string): ErrorBody => ({
  error: {
    code: error.code,
    message: error.message,
    ...(error.param === undefined ? {} : { param: error.param }),
    request_id: requestId,
  },
});

export const JSON_CONTENT_TYPE = "application/json; charset=utf-8";

/** `headers` are what the request already earned (request id, rate-limit state); the error's own win. */
export function errorResponse(error: AppError, requestId: string, headers: Record<string, string> = {}): Response {
  const merged = new Headers({ ...headers, "content-type": JSON_CONTENT_TYPE, "x-request-id": requestId, ...error.headers });
  if (error.retryAfter !== undefined) merged.set("retry-after", String(Math.ceil(error.retryAfter)));
  return new Response(JSON.stringify(errorBody(error, requestId)), { status: error.status, headers: merged });
}

interface SchemaWithMessage {
  error?: unknown;
}

/**
 * Turns Elysia's validation error into ours without its `found`/`expected` fields, which
 * echo the request. The schema's own `error` text is preferred: it states the rule.
 */
function fromValidation(error: { valueError?: { path: string; message: string; schema: unknown; value: unknown } }): AppError {
  const issue = error.valueError;
  const param = issue?.path.split("/").filter(Boolean)[0] ?? "body";
  if (!issue || issue.path === "") return new AppError("invalid_request", 422, "the request body must be a JSON object", { param });
  if (issue.value === undefined) return new AppError("invalid_request", 422, `${param} is required`, { param });
  const stated = (issue.schema as SchemaWithMessage).error;
  const message = typeof stated === "string" ? stated : `${param} is invalid: ${issue.message.toLowerCase()}`;
  return new AppError("invalid_request", 422, message, { param });
}

/** Maps any failure, ours or Elysia's, to one AppError; unknown ones become a generic 500. */
export function toAppError(code: unknown, error: unknown): AppError {
  if (error instanceof AppError) return error;
  switch (code) {
    case "VALIDATION":
      return fromValidation(error as Parameters<typeof fromValidation>[0]);
    case "PARSE": {
      // A throw inside a `parse` hook arrives wrapped: the real reason is its cause.
      const cause = (error as { cause?: unknown }).cause;
      return cause instanceof AppError ? cause : new AppError("invalid_json", 400, "the request body is not valid JSON");
    }
    case "NOT_FOUND":
      return new AppError("not_found", 404, "no such endpoint");
    default:
      return new AppError("internal", 500, "internal error", { cause: error });
  }
}

/** The one place where failures become responses; only unexpected ones are logged, with detail. */
export const errorHandler = (log: Logger) =>
  new Elysia({ name: "parley/errors" }).onError({ as: "global" }, ({ code, error, request, set }) => {
    const appError = toAppError(code, error);
    const context = contextOf(request);
    context.status = appError.status;
    if (appError.code === "internal") log.error({ request_id: context.id, err: error }, "unhandled error");
    return errorResponse(appError, context.id, set.headers as Record<string, string>);
  });
