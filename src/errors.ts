/**
 * Every failure a client can see is a ParleyError: a stable `kind` and a message safe to show,
 * plus what that kind needs (the parameter at fault, how long to wait). Nothing here knows HTTP:
 * statuses, wire codes and headers are one table in src/http/errors.ts, so another API (an
 * OpenAI-compatible one, say) can map the same kinds its own way.
 */
/** A wait or a generation that ended because its signal aborted (`AbortError`, as `fetch` throws). */
export const isAbort = (error: unknown): boolean => error instanceof Error && error.name === "AbortError";

export abstract class ParleyError extends Error {
  abstract readonly kind: string;
}

/** The request itself cannot be taken as HTTP asks (an invalid `Host`, say). */
export class BadRequest extends ParleyError {
  readonly kind = "bad_request";
}

/** The request body did not arrive in the time allowed. */
export class RequestTimeout extends ParleyError {
  readonly kind = "request_timeout";

  constructor(readonly seconds: number) {
    super(`the request body must arrive within ${seconds} s`);
  }
}

/** The request body is not JSON (or not UTF-8 text). */
export class InvalidJson extends ParleyError {
  readonly kind = "invalid_json";

  constructor() {
    super("the request body is not valid JSON");
  }
}

export class Unauthorized extends ParleyError {
  readonly kind = "unauthorized";

  constructor(
    message: string,
    /** A credential was presented (and is wrong), as opposed to none at all. */
    readonly tokenSent: boolean,
  ) {
    super(message);
  }
}

export class Forbidden extends ParleyError {
  readonly kind = "forbidden";

  constructor(
    message: string,
    readonly param?: string,
  ) {
    super(message);
  }
}

export class NotFound extends ParleyError {
  readonly kind = "not_found";
}

/** A request named a model the service does not have. */
export class ModelNotFound extends ParleyError {
  readonly kind = "model_not_found";
  readonly param = "model";
}

/** The target exists, but not for this operation. */
export class MethodNotAllowed extends ParleyError {
  readonly kind = "method_not_allowed";

  constructor(readonly allowed: readonly string[]) {
    super(`use ${allowed.join(" or ")} on this endpoint`);
  }
}

export class PayloadTooLarge extends ParleyError {
  readonly kind = "payload_too_large";

  constructor(
    readonly limitBytes: number,
    message = `the request body must be at most ${limitBytes} bytes`,
  ) {
    super(message);
  }
}

export class UnsupportedMediaType extends ParleyError {
  readonly kind = "unsupported_media_type";
}

/**
 * The part of a request a refusal is about, in the domain's words. Each protocol spells it as one
 * of its own fields (its `FieldNames`, beside its presenter), so nothing below the HTTP layer names
 * a field of any protocol.
 */
export type Field =
  /** The conversation the request gives; its `item`-th message or item; what a tool's result answers. */
  | { part: "history"; item?: number; detail?: "answers" }
  /** The format a reply is held to (JSON, a schema). */
  | { part: "format" }
  /** The tools offered, together. */
  | { part: "tools" }
  /** The `index`-th tool offered: its parameters' schema, or its name. */
  | { part: "tool"; index: number; detail: "parameters" | "name" }
  /** Which tool a reply must call, if any. */
  | { part: "toolChoice" }
  /** The request's tool `index` that names an MCP server: its label, URL, headers or allowed tools. */
  | { part: "serverTool"; index: number; detail: "label" | "url" | "headers" | "allowedTools" }
  /** How many tokens a thought may take. */
  | { part: "thoughtBudget" }
  /** The request's own context size, below the model's. */
  | { part: "context" }
  /** Biases added to tokens' logits. */
  | { part: "tokenBias" }
  /** The log-probabilities asked for. */
  | { part: "logprobs" }
  /** The samplers a reply is drawn through. */
  | { part: "sampler" }
  /** The earlier response a response continues. */
  | { part: "continues" }
  /** The stored conversation a turn is added to. */
  | { part: "conversation" }
  /** A response generated in the background, whatever its client does. */
  | { part: "detached" }
  /** Where a page of items starts. */
  | { part: "pageAfter" }
  /** The model the request names. */
  | { part: "model" }
  /** The conversation's `index`-th picture, counted from its first message's first picture. */
  | { part: "image"; index: number }
  /** The `index`-th text a retrieval model pools (a text to embed, a document to rank). */
  | { part: "input"; index: number }
  /** How many dimensions an embedding has. */
  | { part: "dimensions" }
  /** What a completion fills in between (the text after the insertion point is what asks for it); `start`: the middle's start the client has. */
  | { part: "infill"; detail?: "start" };

/**
 * A field or parameter is missing, of the wrong type or out of range. `field` is the part of the
 * request at fault in the domain's words, or, from the HTTP layer, the field as its protocol
 * spells it; `message` never repeats it (a protocol without a field for it leads with it).
 */
export class InvalidInput extends ParleyError {
  readonly kind = "invalid_input";

  constructor(
    readonly field: Field | string,
    message: string,
  ) {
    super(message);
  }

  /** The field as the request's protocol spells it, once it is spelled (`spelled` in src/http/field-names.ts); else the domain's word. */
  get param(): string {
    const { field } = this;
    if (typeof field === "string") return field;
    return "index" in field ? `${field.part}[${field.index}]` : "item" in field && field.item !== undefined ? `${field.part}[${field.item}]` : field.part;
  }
}

/** A key's allowance at the moment of a request. */
export interface Quota {
  limit: number;
  remaining: number;
  /** Until the allowance is whole again. */
  resetMs: number;
}

/** The caller asked too much; it may try again after `retryAfterMs`. */
export class RateLimited extends ParleyError {
  readonly kind = "rate_limited";

  constructor(
    message: string,
    readonly retryAfterMs: number,
    readonly quota?: Quota,
  ) {
    super(message);
  }
}

/** The user's token quota for the period is spent (or too little is left for this reply's prompt). */
export class QuotaExceeded extends ParleyError {
  readonly kind = "quota_exceeded";

  constructor(
    message: string,
    readonly retryAfterMs: number,
    readonly quota: Quota,
  ) {
    super(message);
  }
}

/** Parley cannot take the work now (loading, shutting down, queue full); worth retrying later. */
export class Overloaded extends ParleyError {
  readonly kind = "overloaded";

  constructor(
    message: string,
    readonly retryAfterMs: number,
  ) {
    super(message);
  }
}

/** A server the request's tools depend on (an MCP server the operator lists) could not be reached or refused. */
export class DependencyFailed extends ParleyError {
  readonly kind = "dependency_failed";
}

/** Anything unexpected: the message is generic, the detail stays in `cause` for the log. */
export class Internal extends ParleyError {
  readonly kind = "internal";

  constructor(cause: unknown) {
    super("internal error", { cause });
  }
}

/** Every ParleyError is one of these: the table that maps them to HTTP is checked against it. */
export type DomainError =
  | BadRequest
  | RequestTimeout
  | InvalidJson
  | Unauthorized
  | Forbidden
  | NotFound
  | ModelNotFound
  | MethodNotAllowed
  | PayloadTooLarge
  | UnsupportedMediaType
  | InvalidInput
  | RateLimited
  | QuotaExceeded
  | Overloaded
  | DependencyFailed
  | Internal;

export type ErrorKind = DomainError["kind"];
