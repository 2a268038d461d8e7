import { Elysia } from "elysia";

/** What Parley knows about a request while it runs; read by the log line and the metrics. */
export interface RequestContext {
  id: string;
  startedAt: number;
  /** The URL's path, parsed once for the hooks that route, authenticate and label by it. */
  path: string;
  /** Set once authenticated. */
  userId?: number;
  keyId?: number;
  /** Set by the error handler: the status Elysia's own bookkeeping does not see. */
  status?: number;
  /** Generated tokens, for chat requests. */
  tokens?: number;
  /** The matched route's pattern: a bounded label, unlike the raw path. */
  route?: string;
  /** A stream is finished (logged, counted) when its last event is written, not when headers go out. */
  streaming?: boolean;
  ended?: boolean;
  finished?: boolean;
  /** Writes the request's log line and metrics; set once the response exists. */
  record?: () => void;
}

const SAFE_ID = /^[A-Za-z0-9._:-]{1,128}$/;
const contexts = new WeakMap<Request, RequestContext>();

export function contextOf(request: Request): RequestContext {
  let context = contexts.get(request);
  if (!context) {
    context = { id: crypto.randomUUID(), startedAt: performance.now(), path: new URL(request.url).pathname };
    contexts.set(request, context);
  }
  return context;
}

/** Echoes a client's `X-Request-Id` when it is short and safe to log, else mints one. */
export const requestContext = new Elysia({ name: "parley/request-context" }).onRequest(({ request, set }) => {
  const supplied = request.headers.get("x-request-id");
  const context = contextOf(request);
  if (supplied !== null && SAFE_ID.test(supplied)) context.id = supplied;
  set.headers["x-request-id"] = context.id;
});
