import { Elysia } from "elysia";
import type { KeyStore } from "../db/storage";
import type { Principal } from "../db/types";
import { Forbidden, Unauthorized } from "../errors";
import { dialectOf } from "./errors";
import type { RateLimiter } from "./rate-limit";
import { contextOf } from "./request-context";
import type { RouteTable } from "./routing";

/** What a route asks of a request's key: any valid key, or an admin's. */
export type Access = "key" | "admin";

/** RFC 6750 token68 characters. */
const BEARER = /^bearer +([A-Za-z0-9\-._~+/]+=*)$/i;

type Credentials = { token: string } | { problem: "missing" | "malformed"; tokenSent: boolean };

/**
 * Reads only the Authorization header: tokens in the query string end up in access logs,
 * so they are never accepted (unlike @elysiajs/bearer's default). The scheme is matched
 * case-insensitively (RFC 7235) and exactly one token must follow it.
 */
export function readCredentials(header: string | null): Credentials {
  if (header === null || header.trim() === "") return { problem: "missing", tokenSent: false };
  const match = BEARER.exec(header.trim());
  if (match) return { token: match[1]! };
  return { problem: "malformed", tokenSent: /^bearer\s/i.test(header.trim()) };
}

const missingKey = () => new Unauthorized("an API key is required: send Authorization: Bearer <key>", false);

export async function authenticate(keys: KeyStore, header: string | null): Promise<Principal> {
  const credentials = readCredentials(header);
  if ("problem" in credentials) {
    throw credentials.problem === "missing" ? missingKey() : new Unauthorized("the Authorization header must be: Bearer <key>", credentials.tokenSent);
  }
  const principal = await keys.verify(credentials.token);
  if (!principal) throw new Unauthorized("the API key is unknown or revoked", true);
  return principal;
}

/**
 * The request's credential as an `Authorization` value. Anthropic's clients send their key as
 * `x-api-key`: taken as the bearer token on its Messages API only, and on the model listing when
 * the request is Anthropic's (`anthropic-version`), where those clients speak (a header elsewhere
 * would be one more way for a key to leak). A request that names two different
 * keys there is refused: answering it as either user would bill one for what the other asked.
 */
function credentialOf(request: Request, path: string): string | null {
  const authorization = request.headers.get("authorization");
  const apiKey = dialectOf(path, request.headers) === "anthropic" ? request.headers.get("x-api-key")?.trim() : undefined;
  if (apiKey === undefined || apiKey === "") return authorization;
  if (authorization === null) return `Bearer ${apiKey}`;
  const credentials = readCredentials(authorization);
  if ("token" in credentials && credentials.token === apiKey) return authorization;
  throw new Unauthorized("the Authorization and x-api-key headers name different keys: send one key, in either header", true);
}

/**
 * OpenAPI's security requirement for an access level. OpenAPI 3.1 lets a non-OAuth scheme list
 * the roles it requires: `bearer: ["admin"]`. The route table reads it back (`accessOf`), so a
 * route's declaration is both its documentation and what the gate enforces.
 */
const security = (access: Access) => [{ bearer: access === "admin" ? ["admin"] : [] }];

export function accessOf(detail: unknown): Access | undefined {
  const requirement = (detail as { security?: { bearer?: string[] }[] } | undefined)?.security?.[0]?.bearer;
  if (requirement === undefined) return undefined;
  return requirement.includes("admin") ? "admin" : "key";
}

/**
 * The one way a route (or a `guard` around a group) says it needs a key: `{ auth: "key" }` or
 * `{ auth: "admin" }`. Handlers then get the verified `principal`.
 */
export const requireKey = new Elysia({ name: "parley/require-key" }).macro({
  auth: (access: Access) => ({
    detail: { security: security(access) },
    resolve: ({ request }) => {
      const { principal } = contextOf(request);
      // The gate authenticates every route whose declaration this macro wrote.
      if (!principal) throw new Error("a route that needs a key was reached without one");
      return { principal };
    },
  }),
});

/**
 * Authenticates, rate-limits and checks the role in `onRequest`, which runs before Elysia parses
 * the body: a request with a bad key and a bad body must get 401, not 400/413/415, and a flood
 * must be refused before its bodies are read. Which routes need which key comes from their own
 * `auth` declarations, through the route table.
 */
export const authGate = (keys: KeyStore, limiter: RateLimiter, routes: RouteTable) =>
  new Elysia({ name: "parley/auth" }).onRequest(async ({ request, set }) => {
    const context = contextOf(request);
    const access = routes.match(context.path, request.method);
    if (access === undefined) return;
    const principal = await authenticate(keys, credentialOf(request, context.path));
    context.principal = principal;
    Object.assign(set.headers, await limiter.take(principal.keyId));
    if (access === "admin" && principal.role !== "admin") throw new Forbidden("this endpoint needs an admin key");
  });
