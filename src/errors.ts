/**
 * Every failure a client can see is an AppError: a stable `code`, the HTTP `status`
 * it maps to, a message safe to show, and optionally the offending parameter.
 * Layers below HTTP throw these without knowing about HTTP; the root error handler
 * turns them into the contract's JSON body.
 */
export type ErrorCode =
  | "invalid_json"
  | "unauthorized"
  | "forbidden"
  | "not_found"
  | "method_not_allowed"
  | "payload_too_large"
  | "unsupported_media_type"
  | "invalid_request"
  | "rate_limited"
  | "overloaded"
  | "internal";

export interface AppErrorOptions {
  param?: string;
  /** Seconds, sent as `Retry-After`. */
  retryAfter?: number;
  headers?: Record<string, string>;
  cause?: unknown;
}

export class AppError extends Error {
  readonly param?: string;
  readonly retryAfter?: number;
  readonly headers?: Record<string, string>;

  constructor(
    readonly code: ErrorCode,
    readonly status: number,
    message: string,
    options: AppErrorOptions = {},
  ) {
    super(message, { cause: options.cause });
    this.name = "AppError";
    this.param = options.param;
    this.retryAfter = options.retryAfter;
    this.headers = options.headers;
  }
}

export const invalidRequest = (param: string, message: string) =>
  new AppError("invalid_request", 422, message, { param });

export const overloaded = (message: string, retryAfter = 1) =>
  new AppError("overloaded", 503, message, { retryAfter });
