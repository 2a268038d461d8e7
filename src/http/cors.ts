import { Elysia } from "elysia";
import { contextOf } from "./request-context";
import type { RouteTable } from "./routing";

/** What a browser page may send: the key (also as Anthropic's clients send it), JSON, and the ids and versions Parley reads. */
const ALLOW_HEADERS = "authorization, content-type, x-request-id, x-conversation-id, x-api-key, anthropic-version, anthropic-beta";
/** What a browser page may read besides the simple headers: the id to quote, and when to retry. */
const EXPOSE_HEADERS = "x-request-id, retry-after, x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset";
const PREFLIGHT_MAX_AGE_S = 600;

/**
 * `OPTIONS` and CORS. `OPTIONS` on any route answers 204 with `Allow` (RFC 9110), before
 * authentication: a browser's preflight carries no key. Pages from `origins` (exact origins, or
 * `*` for any) may call the API: preflights are granted and every response, errors too, tells the
 * browser it may read it. Other origins get no CORS headers at all, so browsers keep them out.
 */
export function cors(origins: readonly string[], routes: RouteTable) {
  const anyOrigin = origins.includes("*");
  const allowedOrigin = (request: Request): string | undefined => {
    const origin = request.headers.get("origin");
    if (origin === null || origins.length === 0) return undefined;
    return anyOrigin ? "*" : origins.includes(origin) ? origin : undefined;
  };
  return new Elysia({ name: "parley/cors" }).onRequest(({ request, set }) => {
    const origin = allowedOrigin(request);
    const granted = origin === undefined ? {} : { "access-control-allow-origin": origin, vary: "Origin" };
    if (request.method === "OPTIONS") {
      const allow = [...routes.allowed(contextOf(request).path), "OPTIONS"].join(", ");
      const preflight = origin !== undefined && request.headers.has("access-control-request-method");
      return new Response(null, {
        status: 204,
        headers: {
          ...(set.headers as Record<string, string>),
          allow,
          ...granted,
          ...(preflight && {
            "access-control-allow-methods": allow,
            "access-control-allow-headers": ALLOW_HEADERS,
            "access-control-max-age": String(PREFLIGHT_MAX_AGE_S),
          }),
        },
      });
    }
    Object.assign(set.headers, granted, origin === undefined ? {} : { "access-control-expose-headers": EXPOSE_HEADERS });
  });
}
