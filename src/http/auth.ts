import { Elysia } from "elysia";
import type { KeyStore, Principal } from "../db/keys";
import { Unauthorized } from "../errors";
import type { RateLimiter } from "./rate-limit";
import { contextOf } from "./request-context";

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

export function authenticate(keys: KeyStore, header: string | null): Principal {
  const credentials = readCredentials(header);
  if ("problem" in credentials) {
    throw credentials.problem === "missing"
      ? missingKey()
      : new Unauthorized("the Authorization header must be: Bearer <key>", credentials.tokenSent);
  }
  const principal = keys.verify(credentials.token);
  if (!principal) throw new Unauthorized("the API key is unknown or revoked", true);
  return principal;
}

/**
 * Authenticates and rate-limits in `onRequest`, which runs before Elysia parses the body: a
 * request with a bad key and a bad body must get 401, not 400/413/415, and a flood must be
 * refused before its bodies are read. Routes that use this plugin get `principal`.
 */
export function auth(keys: KeyStore, limiter: RateLimiter, isProtected: (path: string) => boolean) {
  const principals = new WeakMap<Request, Principal>();
  return new Elysia({ name: "parley/auth" })
    .onRequest(({ request, set }) => {
      if (!isProtected(contextOf(request).path)) return;
      const principal = authenticate(keys, request.headers.get("authorization"));
      const context = contextOf(request);
      context.userId = principal.userId;
      context.keyId = principal.keyId;
      principals.set(request, principal);
      Object.assign(set.headers, limiter.take(principal.keyId));
    })
    .resolve({ as: "scoped" }, ({ request }) => {
      const principal = principals.get(request);
      if (!principal) throw missingKey();
      return { principal };
    });
}
