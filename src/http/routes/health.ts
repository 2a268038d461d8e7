import { Elysia } from "elysia";
import { overloaded } from "../../errors";
import { errorResponses } from "../openapi";

/** Liveness says the process serves; readiness says it can answer a chat (database and model). */
export const healthRoutes = (deps: { isReady: () => boolean }) =>
  new Elysia({ name: "parley/routes/health" })
    .get("/healthz", () => ({ status: "ok" }), { detail: { summary: "Liveness: 200 while the process serves" } })
    .get("/readyz", () => {
      if (!deps.isReady()) throw overloaded("the model is still loading", 5);
      return { status: "ready" };
    }, { detail: { summary: "Readiness: 200 once the database is open and the model loaded", responses: errorResponses(503) } as never });
