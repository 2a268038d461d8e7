import { Elysia } from "elysia";
import { Forbidden } from "../../errors";
import type { Metrics } from "../../metrics";
import type { auth } from "../auth";

/**
 * Prometheus text format; behind an admin key unless the operator made it public (then the auth
 * plugin does not treat the path as protected, and there is no principal to check).
 */
export const metricsRoutes = (deps: { metrics: Metrics; auth: ReturnType<typeof auth>; isPublic: boolean }) => {
  const expose = async () =>
    new Response(await deps.metrics.registry.metrics(), { headers: { "content-type": deps.metrics.registry.contentType } });
  if (deps.isPublic) return new Elysia({ name: "parley/routes/metrics" }).get("/metrics", expose, { detail: { hide: true } });
  return new Elysia({ name: "parley/routes/metrics" }).use(deps.auth).get("/metrics", expose, {
    beforeHandle({ principal }) {
      if (principal.role !== "admin") throw new Forbidden("metrics need an admin key");
    },
    detail: { hide: true },
  });
};
