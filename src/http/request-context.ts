import { Elysia } from "elysia";
import type { Principal } from "../db/types";
import { BadRequest } from "../errors";
import type { FieldNames } from "./field-names";

/**
 * What Parley knows about a request while it runs, for its log line and metrics. Each field
 * has one writer: the id, start and path are fixed when first asked for; `principal` is set by
 * authentication, `status` by the error handler, `tokens` by the turn driver, `quota` by the
 * turn's hooks (served), or by the error handler or a stream's error event (quota_exceeded). How a response
 * ends (a stream's last event) is the observer's own business, not kept here.
 */
export interface RequestContext {
  readonly id: string;
  readonly startedAt: number;
  /** The URL's path, parsed once for the hooks that route, authenticate and label by it. */
  readonly path: string;
  principal?: Principal;
  /** An error's status: Elysia's own bookkeeping does not see a status set by `onError`. */
  status?: number;
  /** Reply tokens generated, for chat requests. */
  tokens?: number;
  /** The conversation a chat request is a turn of, for its log line. */
  conversationId?: string;
  /** Pictures of a conversation's stored history that its model could not be shown, left out of the prompt. */
  picturesLeftOut?: number;
  /** A generating request of a user under a token quota: how it ended, for the metrics. */
  quota?: "served" | "quota_exceeded";
  /** How the route's protocol spells the fields a refusal names (field-names.ts). */
  fields?: FieldNames;
  /** A refused (or failed) request's error code and the field at fault, for its log line: never its message, which may quote the request. */
  refusal?: { code: string; param?: string };
}

const SAFE_ID = /^[A-Za-z0-9._:-]{1,128}$/;
const contexts = new WeakMap<Request, RequestContext>();

/** Echoes a client's `X-Request-Id` when it is short and safe to log, else mints one. */
function requestId(request: Request): string {
  const supplied = request.headers.get("x-request-id");
  return supplied !== null && SAFE_ID.test(supplied) ? supplied : crypto.randomUUID();
}

/**
 * The path of `url` without parsing it as a URL: Bun leaves `request.url` relative (`/healthz`)
 * when the Host header is not a valid host, and `new URL` would throw on it.
 */
function pathOf(url: string): string {
  const start = url.startsWith("/") ? 0 : url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return "/";
  const end = url.slice(start).search(/[?#]/);
  return end < 0 ? url.slice(start) : url.slice(start, start + end);
}

export function contextOf(request: Request): RequestContext {
  let context = contexts.get(request);
  if (!context) {
    context = { id: requestId(request), startedAt: performance.now(), path: pathOf(request.url) };
    contexts.set(request, context);
  }
  return context;
}

/** RFC 3986's host (a name, an IPv4 address or a bracketed IPv6 one) and optional port. */
const HOST = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~%!$&'()*+,;=]+)(:\d{1,5})?$/;

/**
 * The Host header's value is a host: its syntax, and what the URL parser makes of it (an IPv6
 * address, a port in range). None at all is left to Bun, which then leaves the URL relative (a
 * request made in-process has none and an absolute URL).
 */
const validHost = (host: string | null): boolean => host === null || (HOST.test(host) && URL.canParse(`http://${host}/`));

/**
 * Every response carries its request id and, with several nodes behind a balancer, the node that
 * answered (`X-Parley-Node`), so an operator can tell which node served what.
 */
export const requestContext = (node: string | undefined) =>
  new Elysia({ name: "parley/request-context", seed: node }).onRequest(({ request, set }) => {
    set.headers["x-request-id"] = contextOf(request).id;
    if (node !== undefined) set.headers["x-parley-node"] = node;
    // HTTP/1.1 (RFC 9112, 3.2): an invalid Host is a 400. Bun leaves the URL relative for some,
    // and takes others (an unclosed "[::1") as they are.
    if (request.url.startsWith("/") || !validHost(request.headers.get("host"))) throw new BadRequest("the Host header is not a valid host");
  });
