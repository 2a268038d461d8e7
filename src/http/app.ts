import { Elysia } from "elysia";
import type { ChatService } from "../chat/service";
import type { Db } from "../db/client";
import type { KeyStore } from "../db/keys";
import { auth } from "./auth";
import { errorHandler, JSON_CONTENT_TYPE } from "./errors";
import { requestId } from "./request-id";
import { routeGuard } from "./routing";
import { chatRoutes } from "./routes/chat";
import { healthRoutes } from "./routes/health";
import { messagesRoutes } from "./routes/messages";

export interface AppDeps {
  db: Db;
  keys: KeyStore;
  chat: ChatService;
  /** True once the database is open and the model loaded. */
  isReady: () => boolean;
  bodyLimitBytes: number;
  heartbeatMs: number;
}

const API_PREFIX = "/api/";

/** Builds the HTTP app from its dependencies; nothing here reads config or opens files. */
export function createApp(deps: AppDeps) {
  const authentication = auth(deps.keys, (path) => path.startsWith(API_PREFIX));
  const app = new Elysia({ name: "parley" });
  return app
    .use(errorHandler)
    .use(requestId)
    .use(routeGuard(() => app.routes))
    .onRequest(({ set }) => {
      // Elysia writes `application/json;charset=utf-8`; the contract spells it with a space.
      set.headers["content-type"] = JSON_CONTENT_TYPE;
    })
    .use(healthRoutes(deps))
    .use(messagesRoutes({ db: deps.db, auth: authentication }))
    .use(chatRoutes({ chat: deps.chat, auth: authentication, bodyLimitBytes: deps.bodyLimitBytes, heartbeatMs: deps.heartbeatMs }));
}

export type App = ReturnType<typeof createApp>;
