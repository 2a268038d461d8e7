import { Elysia } from "elysia";
import { modelLoading } from "../../chat/turn-runner";
import type { Health, NativesBuild, Ready } from "../contract";
import { errorResponses, jsonResponse } from "../openapi";

/**
 * Liveness says the process serves (and how a background build of Parley's natives is going);
 * readiness says it can answer a chat: the model is loaded and the database answers (a load
 * balancer then sends chats elsewhere while it cannot be reached).
 */
export const healthRoutes = (deps: { isReady: () => boolean; ping: () => Promise<void>; nativesBuild?: () => NativesBuild | undefined }) =>
  new Elysia({ name: "parley/routes/health" })
    .get(
      "/healthz",
      (): Health => {
        const build = deps.nativesBuild?.();
        return build === undefined ? { status: "ok" } : { status: "ok", natives_build: build };
      },
      {
        detail: {
          summary: "Liveness: 200 while the process serves",
          responses: { "200": jsonResponse("The process serves; while Parley's natives build behind it, how far along they are", "Health") },
        },
      },
    )
    .get(
      "/readyz",
      async (): Promise<Ready> => {
        if (!deps.isReady()) throw modelLoading();
        await deps.ping();
        return { status: "ready" };
      },
      {
        detail: {
          summary: "Readiness: 200 while the model is loaded and the database answers",
          responses: { "200": jsonResponse("Ready to answer a chat", "Ready"), ...errorResponses("overloaded") },
        },
      },
    );
