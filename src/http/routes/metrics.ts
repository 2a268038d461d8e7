import { Elysia } from "elysia";
import type { Metrics } from "../../metrics";
import { requireKey } from "../auth";
import { documentResponse, errorResponses } from "../openapi";

/** Prometheus text format; behind an admin key unless the operator made it public. */
export const metricsRoutes = (deps: { metrics: Metrics; isPublic: boolean }) =>
  new Elysia({ name: "parley/routes/metrics" })
    .use(requireKey)
    .get("/metrics", async () => new Response(await deps.metrics.registry.metrics(), { headers: { "content-type": deps.metrics.registry.contentType } }), {
      ...(deps.isPublic ? {} : { auth: "admin" as const }),
      detail: {
        summary: "Prometheus metrics (an admin key unless PARLEY_METRICS_PUBLIC is set)",
        responses: {
          "200": documentResponse("The metrics in Prometheus' text format", "text/plain"),
          ...(deps.isPublic ? {} : errorResponses("unauthorized", "forbidden", "rate_limited")),
        },
      },
    });
