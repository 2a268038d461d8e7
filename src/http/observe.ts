import { Elysia } from "elysia";
import type { Logger } from "../log";
import type { Metrics } from "../metrics";
import { contextOf, type RequestContext } from "./request-context";

/**
 * One log line and one set of metrics per request, written when the response is complete:
 * at once for ordinary responses, when the last event is written for streams (the chat route
 * calls `finishRequest`), since Elysia's after-response hook fires before a stream's body.
 */
export function observe(log: Logger, metrics: Metrics, routes: () => readonly { path: string }[]) {
  let known: Set<string> | undefined;
  // A request refused before routing (401, 404, 405, 429) has no matched route: label it by its
  // path only when that is one of ours, so arbitrary paths cannot blow up the label set.
  const label = (request: Request, route: string) => {
    if (route) return route;
    known ??= new Set(routes().map((r) => r.path));
    const path = contextOf(request).path;
    return known.has(path) ? path : "unmatched";
  };
  return new Elysia({ name: "parley/observe" }).onAfterResponse({ as: "global" }, ({ request, set, responseValue, route }) => {
    const context = contextOf(request);
    context.route = label(request, route);
    context.status ??= responseValue instanceof Response ? responseValue.status : typeof set.status === "number" ? set.status : 200;
    context.record = () => {
      const seconds = (performance.now() - context.startedAt) / 1000;
      const labels = { route: context.route!, method: request.method };
      metrics.requests.inc({ ...labels, status: String(context.status) });
      metrics.requestDuration.observe(labels, seconds);
      log.info(
        {
          request_id: context.id,
          method: request.method,
          route: context.route,
          status: context.status,
          duration_ms: Math.round(seconds * 1000),
          user_id: context.userId,
          tokens: context.tokens,
        },
        "request",
      );
    };
    flush(context);
  });
}

/** Called by a stream when its last event is written. */
export function finishRequest(request: Request): void {
  const context = contextOf(request);
  context.ended = true;
  flush(context);
}

/** Writes once, when both the response exists and (for a stream) its body has ended, in either order. */
function flush(context: RequestContext): void {
  if (context.finished || !context.record || (context.streaming && !context.ended)) return;
  context.finished = true;
  context.record();
}
