import { Elysia } from "elysia";
import type { Metrics } from "../../metrics";
import { requireKey } from "../auth";

/** Prometheus text format; behind an admin key unless the operator made it public. */
export const metricsRoutes = (deps: { metrics: Metrics; isPublic: boolean }) =>
  new Elysia({ name: "parley/routes/metrics" }).use(requireKey).get(
    "/metrics",
    async () => new Response(await deps.metrics.registry.metrics(), { headers: { "content-type": deps.metrics.registry.contentType } }),
    { ...(deps.isPublic ? {} : { auth: "admin" as const }), detail: { hide: true } },
  );
