import { Elysia } from "elysia";
import { modelLoading } from "../../chat/turn-runner";
import type { Health, Ready } from "../contract";
import { errorResponses, jsonResponse } from "../openapi";

/** Liveness says the process serves; readiness says it can answer a chat (database and model). */
export const healthRoutes = (deps: { isReady: () => boolean }) =>
  new Elysia({ name: "parley/routes/health" })
    .get("/healthz", (): Health => ({ status: "ok" }), {
      detail: { summary: "Liveness: 200 while the process serves", responses: { "200": jsonResponse("The process serves", "Health") } },
    })
    .get(
      "/readyz",
      (): Ready => {
        if (!deps.isReady()) throw modelLoading();
        return { status: "ready" };
      },
      {
        detail: {
          summary: "Readiness: 200 once the database is open and the model loaded",
          responses: { "200": jsonResponse("Ready to answer a chat", "Ready"), ...errorResponses("overloaded") },
        },
      },
    );
