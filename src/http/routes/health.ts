import { Elysia } from "elysia";
import { overloaded } from "../../errors";

/** Liveness says the process serves; readiness says it can answer a chat (database and model). */
export const healthRoutes = (deps: { isReady: () => boolean }) =>
  new Elysia({ name: "parley/routes/health" })
    .get("/healthz", () => ({ status: "ok" }))
    .get("/readyz", () => {
      if (!deps.isReady()) throw overloaded("the model is still loading", 5);
      return { status: "ready" };
    });
