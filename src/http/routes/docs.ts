import { openapi } from "@elysiajs/openapi";
import type { AnyElysia } from "elysia";
import swaggerCss from "swagger-ui-dist/swagger-ui.css" with { type: "file" };
// Served by Parley itself: the plugin's default UI comes from a CDN, which an offline box cannot reach.
import swaggerBundle from "swagger-ui-dist/swagger-ui-bundle.js" with { type: "file" };
import pkg from "../../../package.json";
import { documentResponse, SCHEMAS } from "../openapi";

const ASSETS = "/docs/assets";

/**
 * `/openapi.json` generated from the route schemas, and `/docs`, a Swagger UI page. Applied to the
 * root app itself (not wrapped in a plugin of its own): the generator reads the routes of the
 * instance it is used on.
 */
export const docsRoutes = () => (app: AnyElysia) =>
  app
    .get(
      `${ASSETS}/swagger-ui-bundle.js`,
      () => new Response(Bun.file(swaggerBundle), { headers: { "content-type": "text/javascript; charset=utf-8", "cache-control": "public, max-age=86400" } }),
    )
    .get(
      `${ASSETS}/swagger-ui.css`,
      () => new Response(Bun.file(swaggerCss), { headers: { "content-type": "text/css; charset=utf-8", "cache-control": "public, max-age=86400" } }),
    )
    .use(
      openapi({
        path: "/docs",
        specPath: "/openapi.json",
        provider: "swagger-ui",
        swagger: { cdn: `${ASSETS}/swagger-ui-bundle.js`, theme: `${ASSETS}/swagger-ui.css` },
        // Parley's paths contain a dot (`/api/v1.0`), which the plugin would take for static files.
        exclude: { staticFile: false, paths: ["/docs", "/openapi.json", `${ASSETS}/swagger-ui-bundle.js`, `${ASSETS}/swagger-ui.css`] },
        documentation: {
          info: {
            title: "Parley API",
            version: pkg.version,
            description: "A self-hosted chat service answering from a local GGUF model. See docs/API.md.",
          },
          // The plugin serves these two itself and leaves them out of the document it writes.
          paths: {
            "/docs": { get: { summary: "This document as a Swagger UI page", responses: { "200": documentResponse("The page", "text/html") } } },
            "/openapi.json": {
              get: {
                summary: "This document (OpenAPI 3)",
                responses: { "200": { description: "The document", content: { "application/json": { schema: { type: "object" as const } } } } },
              },
            },
          },
          components: {
            securitySchemes: { bearer: { type: "http", scheme: "bearer", description: "An API key from `parley keys create`" } },
            schemas: SCHEMAS as never,
          },
        },
      }),
    );
