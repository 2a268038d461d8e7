import { Elysia } from "elysia";
import { MethodNotAllowed, NotFound } from "../errors";
import { contextOf } from "./request-context";

interface RouteEntry {
  method: string;
  path: string;
}

export const noSuchEndpoint = () => new NotFound("no such endpoint");

const normalize = (path: string) => (path.length > 1 && path.endsWith("/") ? path.slice(0, -1) : path);

/**
 * Elysia answers a known path with the wrong method as 404; the contract wants 405 with
 * `Allow`. Runs before authentication, so an unknown route is a 404 with or without a key.
 * `routes` is read lazily: the app registers its routes after installing this guard.
 */
export function routeGuard(routes: () => readonly RouteEntry[]) {
  let table: Map<string, string[]> | undefined;
  const methodsByPath = () => {
    if (!table) {
      table = new Map();
      for (const route of routes()) {
        const methods = table.get(normalize(route.path)) ?? [];
        methods.push(route.method);
        if (route.method === "GET") methods.push("HEAD");
        table.set(normalize(route.path), methods);
      }
    }
    return table;
  };
  return new Elysia({ name: "parley/route-guard" }).onRequest(({ request }) => {
    const methods = methodsByPath().get(normalize(contextOf(request).path));
    if (!methods) throw noSuchEndpoint();
    if (!methods.includes(request.method)) throw new MethodNotAllowed(methods);
  });
}
