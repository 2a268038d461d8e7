import { Elysia } from "elysia";
import type { Logger } from "../log";
import type { Metrics } from "../metrics";
import { contextOf } from "./request-context";
import type { RouteTable } from "./routing";

/** Where a response stands: a request is recorded once it has been answered and its body has ended. */
interface Progress {
  answered: boolean;
  /** A generator's body (a stream) is still being written. */
  streaming: boolean;
  recorded: boolean;
  record?: () => void;
}

const isGenerator = (value: unknown): value is AsyncGenerator<unknown, unknown, unknown> =>
  typeof (value as AsyncGenerator | undefined)?.next === "function" && typeof (value as AsyncGenerator)[Symbol.asyncIterator] === "function";

/**
 * One log line and one set of metrics per request, written when the response is complete. Elysia's
 * after-response hook fires before a stream's body is written, so every generator a handler returns
 * is wrapped here and the request is recorded when that generator ends (its last event written, or
 * the client gone). No route takes part: a new streaming route is observed like any other.
 */
export function observe(log: Logger, metrics: Metrics, routes: RouteTable) {
  const progress = new WeakMap<Request, Progress>();
  const progressOf = (request: Request) => {
    let state = progress.get(request);
    if (!state) progress.set(request, (state = { answered: false, streaming: false, recorded: false }));
    return state;
  };
  const flush = (state: Progress) => {
    if (state.recorded || !state.answered || state.streaming || !state.record) return;
    state.recorded = true;
    state.record();
  };

  // A request refused before routing (401, 404, 405, 429) has no matched route: label it by the
  // route its path belongs to, so arbitrary paths cannot blow up the label set.
  const label = (request: Request, route: string) => route || (routes.routeOf(contextOf(request).path) ?? "unmatched");

  return new Elysia({ name: "parley/observe" })
    .mapResponse({ as: "global" }, ({ request, responseValue }) => {
      if (!isGenerator(responseValue)) return;
      const state = progressOf(request);
      state.streaming = true;
      return (async function* () {
        try {
          return yield* responseValue;
        } finally {
          state.streaming = false;
          flush(state);
        }
      })() as never;
    })
    .onAfterResponse({ as: "global" }, ({ request, set, responseValue, route }) => {
      const context = contextOf(request);
      const state = progressOf(request);
      const routeLabel = label(request, route);
      const status = context.status ?? (responseValue instanceof Response ? responseValue.status : typeof set.status === "number" ? set.status : 200);
      state.answered = true;
      state.record = () => {
        const seconds = (performance.now() - context.startedAt) / 1000;
        const labels = { route: routeLabel, method: request.method };
        metrics.requests.inc({ ...labels, status: String(status) });
        if (context.quota) metrics.quotaRequests.inc({ role: context.principal?.role ?? "none", outcome: context.quota });
        metrics.requestDuration.observe(labels, seconds);
        // A balancer's health checks come every second: they are no operator's reading.
        const level = routeLabel === "/healthz" || routeLabel === "/readyz" ? "debug" : "info";
        log[level](
          {
            request_id: context.id,
            method: request.method,
            route: routeLabel,
            status,
            duration_ms: Math.round(seconds * 1000),
            user_id: context.principal?.userId,
            conversation_id: context.conversationId,
            tokens: context.tokens,
            pictures_left_out: context.picturesLeftOut,
            error_code: context.refusal?.code,
            param: context.refusal?.param,
          },
          "request",
        );
      };
      flush(state);
    });
}
