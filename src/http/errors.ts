import { Elysia } from "elysia";
import { AppError } from "../errors";
import { requestIdOf } from "./request-id";

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

export function errorResponse(error: AppError, requestId: string): Response {
  const headers = new Headers({ "content-type": JSON_CONTENT_TYPE, "x-request-id": requestId, ...error.headers });
  if (error.retryAfter !== undefined) headers.set("retry-after", String(Math.ceil(error.retryAfter)));
  return new Response(JSON.stringify(errorBody(error, requestId)), { status: error.status, headers });
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

/** The one place where failures become responses. */
export const errorHandler = new Elysia({ name: "parley/errors" }).onError({ as: "global" }, ({ code, error, request }) => {
  const appError = toAppError(code, error);
  const id = requestIdOf(request);
  if (appError.status >= 500 && appError.code === "internal") {
    console.error(JSON.stringify({ level: "error", request_id: id, msg: "unhandled error", err: String((error as Error)?.stack ?? error) }));
  }
  return errorResponse(appError, id);
});
