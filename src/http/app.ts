import { Elysia } from "elysia";
import type { CompletionService } from "../chat/completions";
import type { ConversationItemService } from "../chat/conversation-item-service";
import { QuotaAdmin } from "../chat/quota-admin";
import type { ResponseService } from "../chat/responses";
import type { RetrievalService } from "../chat/retrieval";
import type { ChatService } from "../chat/service";
import type { TokenLedger } from "../chat/token-ledger";
import type { Storage } from "../db/storage";
import type { Logger } from "../log";
import type { Metrics } from "../metrics";
import { authGate } from "./auth";
import type { BackgroundResponses } from "./background-responses";
import type { NativesBuild } from "./contract";
import { cors } from "./cors";
import { errorHandler, JSON_CONTENT_TYPE } from "./errors";
import type { BodyLimits } from "./json-body";
import { observe } from "./observe";
import { RateLimiter } from "./rate-limit";
import { requestContext } from "./request-context";
import { anthropicRoutes } from "./routes/anthropic";
import { chatRoutes } from "./routes/chat";
import { conversationsRoutes } from "./routes/conversations";
import { docsRoutes } from "./routes/docs";
import { embeddingRoutes } from "./routes/embeddings";
import { healthRoutes } from "./routes/health";
import { infillRoutes } from "./routes/infill";
import { messagesRoutes } from "./routes/messages";
import { metricsRoutes } from "./routes/metrics";
import { modelRoutes } from "./routes/models";
import { ollamaRoutes } from "./routes/ollama";
import { openAiRoutes } from "./routes/openai";
import { openAiConversationRoutes } from "./routes/openai-conversations";
import { quotaRoutes } from "./routes/quotas";
import { rerankRoutes } from "./routes/rerank";
import { responsesRoutes } from "./routes/responses";
import { textCompletionRoutes } from "./routes/text-completions";
import { usageRoutes } from "./routes/usage";
import { webRoutes } from "./routes/web";
import { RouteTable, routeGuard } from "./routing";
import { TurnDriver } from "./turn-driver";

export interface HttpLimits extends BodyLimits {
  heartbeatMs: number;
  /** Requests per minute per key; 0 = unlimited. */
  rateLimitPerMinute: number;
  maxStreamsPerKey: number;
  /** Serve /metrics without a key. */
  metricsPublic: boolean;
  /** Origins whose pages may call the API from a browser (`*`: any); empty: none. */
  corsOrigins: readonly string[];
}

export interface AppDeps {
  storage: Storage;
  chat: ChatService;
  /** The OpenAI-compatible API's stateless completions. */
  completions: CompletionService;
  /** OpenAI's Responses API: kept responses and their chains. */
  responses: ResponseService;
  /** Responses generated whatever their clients do, their events kept for any node to replay. */
  background: BackgroundResponses;
  /** OpenAI's Conversations API: stored conversations as items. */
  conversationItems: ConversationItemService;
  /** Embeddings and reranking, by retrieval models. */
  retrieval: RetrievalService;
  /** Users' tokens and budgets: the one the turns' runner counts to. */
  ledger: TokenLedger;
  /** Names this node in every response's `X-Parley-Node` (several nodes behind a balancer). */
  node?: string;
  /** True once the database is open and the model loaded. */
  isReady: () => boolean;
  /** The background build of Parley's natives, while one runs for this server. */
  nativesBuild?: () => NativesBuild | undefined;
  log: Logger;
  metrics: Metrics;
  limits: HttpLimits;
}

/** Builds the HTTP app from its dependencies; nothing here reads config or opens files. */
export function createApp(deps: AppDeps) {
  const { limits, metrics } = deps;
  const limiter = new RateLimiter(
    limits.rateLimitPerMinute,
    limits.maxStreamsPerKey,
    (reason) => metrics.rateLimited.inc({ reason }),
    deps.storage.buckets,
    deps.storage.streams,
  );
  const turns = new TurnDriver({ limiter, metrics, log: deps.log, heartbeatMs: limits.heartbeatMs });
  // Bun answers a declared body over its own cap (128 MB) with a bare 413 before the app runs;
  // lifting it lets the chat route's capped reader refuse every oversized body with the contract's
  // JSON 413 (it checks Content-Length before reading, so nothing is buffered). Any route that
  // takes a body must therefore read it through `jsonBody`'s cap.
  // Elysia turns on SO_REUSEPORT by default: a second server on the same port would then start
  // and silently take half the connections (with its own database); it must fail instead.
  // `precompile`: every route's handler is compiled before the server listens, not by its first
  // request, which would otherwise pay for it before its first token (docs/performance.md).
  const app = new Elysia({ name: "parley", precompile: true, serve: { maxRequestBodySize: Number.MAX_SAFE_INTEGER, reusePort: false } });
  const routes = new RouteTable(() => app.routes);
  return app
    .use(errorHandler(deps.log))
    .use(requestContext(deps.node))
    .use(observe(deps.log, metrics, routes))
    .use(cors(limits.corsOrigins, routes))
    .use(routeGuard(routes))
    .use(authGate(deps.storage.keys, limiter, routes))
    .onRequest(({ set }) => {
      // Elysia writes `application/json;charset=utf-8`; the contract spells it with a space.
      set.headers["content-type"] = JSON_CONTENT_TYPE;
    })
    .use(healthRoutes({ isReady: deps.isReady, ping: () => deps.storage.ping(), ...(deps.nativesBuild ? { nativesBuild: deps.nativesBuild } : {}) }))
    .use(metricsRoutes({ metrics, isPublic: limits.metricsPublic }))
    .use(docsRoutes())
    .use(webRoutes())
    .use(messagesRoutes({ messages: deps.storage.messages }))
    .use(conversationsRoutes({ conversations: deps.storage.conversations, chat: deps.chat }))
    .use(usageRoutes({ usage: deps.storage.usage, ledger: deps.ledger }))
    .use(quotaRoutes({ admin: new QuotaAdmin(deps.storage.keys, deps.storage.quotas, deps.ledger), body: limits }))
    .use(chatRoutes({ chat: deps.chat, turns, body: limits }))
    .use(openAiRoutes({ completions: deps.completions, turns, body: limits }))
    .use(textCompletionRoutes({ completions: deps.completions, turns, body: limits }))
    .use(infillRoutes({ completions: deps.completions, turns, body: limits }))
    .use(modelRoutes({ models: () => deps.completions.models() }))
    .use(anthropicRoutes({ completions: deps.completions, turns, body: limits }))
    .use(ollamaRoutes({ completions: deps.completions, retrieval: deps.retrieval, turns, body: limits, log: deps.log, metrics }))
    .use(embeddingRoutes({ retrieval: deps.retrieval, body: limits }))
    .use(rerankRoutes({ retrieval: deps.retrieval, body: limits }))
    .use(responsesRoutes({ responses: deps.responses, background: deps.background, turns, body: limits }))
    .use(openAiConversationRoutes({ conversationItems: deps.conversationItems, body: limits }));
}

export type App = ReturnType<typeof createApp>;
