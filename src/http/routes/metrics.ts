import { Elysia } from "elysia";
import { AppError } from "../../errors";
import type { Metrics } from "../../metrics";
import type { auth } from "../auth";

const exposition = (metrics: Metrics) => async () =>
  new Response(await metrics.registry.metrics(), { headers: { "content-type": metrics.registry.contentType } });

/** Prometheus text format; behind an admin key unless the operator made it public. */
export const metricsRoutes = (deps: { metrics: Metrics; auth: ReturnType<typeof auth>; isPublic: boolean }) =>
  deps.isPublic
    ? new Elysia({ name: "parley/routes/metrics" }).get("/metrics", exposition(deps.metrics), { detail: { hide: true } })
    : new Elysia({ name: "parley/routes/metrics" })
        .use(deps.auth)
        .onBeforeHandle(({ principal }) => {
          if (principal.role !== "admin") throw new AppError("forbidden", 403, "metrics need an admin key");
        })
        .get("/metrics", exposition(deps.metrics), { detail: { hide: true } });
