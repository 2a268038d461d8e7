import { Elysia } from "elysia";
import { MethodNotAllowed, NotFound } from "../errors";
import { type Access, accessOf } from "./auth";
import { contextOf } from "./request-context";

interface RouteEntry {
  method: string;
  path: string;
  hooks?: { detail?: unknown };
}

interface Methods {
  /** The route's path as declared (`/v1/models/:model`): a bounded label, unlike request paths. */
  route: string;
  allowed: string[];
  access: Map<string, Access | undefined>;
}

export const noSuchEndpoint = () => new NotFound("no such endpoint");

const normalize = (path: string) => (path.length > 1 && path.endsWith("/") ? path.slice(0, -1) : path);

/** A route path with `:name` segments as a pattern matching one non-empty segment each. */
const pattern = (path: string) =>
  new RegExp(
    `^${path
      .split("/")
      .map((segment) => (segment.startsWith(":") ? "[^/]+" : RegExp.escape(segment)))
      .join("/")}$`,
  );

/**
 * The app's routes by path: which methods each allows and what key each needs. Read lazily from
 * the app, which registers its routes after installing the hooks that consult this table.
 */
export class RouteTable {
  private table: Map<string, Methods> | undefined;
  /** The entries of `table` whose paths have parameters. */
  private patterns: [RegExp, Methods][] = [];

  constructor(private readonly routes: () => readonly RouteEntry[]) {}

  /**
   * The access the route for this request declares (undefined: public). Elysia answers a known path
   * with the wrong method as 404; the contract wants 405 with `Allow`, so both are decided here.
   */
  match(path: string, method: string): Access | undefined {
    const methods = this.lookup(path);
    // OPTIONS is answered on every route (cors.ts): the 405's Allow says so too, as OPTIONS's own does.
    if (!methods.allowed.includes(method)) throw new MethodNotAllowed([...methods.allowed, "OPTIONS"]);
    return methods.access.get(method);
  }

  /** The methods `path` answers (404 when it is no route of ours): what `OPTIONS` reports. */
  allowed(path: string): readonly string[] {
    return this.lookup(path).allowed;
  }

  /** The declared path of the route `path` belongs to; undefined when it is no route of ours. */
  routeOf(path: string): string | undefined {
    return this.find(path)?.route;
  }

  private lookup(path: string): Methods {
    const methods = this.find(path);
    if (!methods) throw noSuchEndpoint();
    return methods;
  }

  private find(path: string): Methods | undefined {
    const exact = normalize(path);
    return this.byPath().get(exact) ?? this.patterns.find(([regex]) => regex.test(exact))?.[1];
  }

  private byPath(): Map<string, Methods> {
    if (this.table) return this.table;
    this.table = new Map();
    for (const route of this.routes()) {
      const path = normalize(route.path);
      const methods: Methods = this.table.get(path) ?? { route: route.path, allowed: [], access: new Map() };
      const access = accessOf(route.hooks?.detail);
      for (const method of route.method === "GET" ? ["GET", "HEAD"] : [route.method]) {
        methods.allowed.push(method);
        methods.access.set(method, access);
      }
      if (!this.table.has(path) && path.includes("/:")) this.patterns.push([pattern(path), methods]);
      this.table.set(path, methods);
    }
    return this.table;
  }
}

/** Runs before authentication, so an unknown route is a 404 with or without a key. */
export const routeGuard = (table: RouteTable) =>
  new Elysia({ name: "parley/route-guard" }).onRequest(({ request }) => {
    table.match(contextOf(request).path, request.method);
  });
