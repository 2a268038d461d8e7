import { afterAll, describe, expect, test } from "bun:test";
import { ConfigError, loadConfig } from "../../src/config";
import { allowSlowTests, bearer, serveApp, testDb } from "../support";

allowSlowTests();

const db = testDb("cors");
const alice = await db.keys.create("alice", "user");
const APP = "https://app.example.com";
const closed = serveApp({ storage: db.storage });
const open = serveApp({ storage: db.storage, limits: { corsOrigins: [APP] } });
const anyone = serveApp({ storage: db.storage, limits: { corsOrigins: ["*"] } });
afterAll(async () => {
  await Promise.all([closed.stop(), open.stop(), anyone.stop()]);
  await db.storage.close();
});

const preflight = (url: string, path: string, origin = APP) =>
  fetch(`${url}${path}`, {
    method: "OPTIONS",
    headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type" },
  });

describe("OPTIONS", () => {
  test("answers 204 with Allow on a route, before any key; 404 elsewhere", async () => {
    const chat = await fetch(`${closed.url}/api/v1.0/chat`, { method: "OPTIONS" });
    expect(chat.status).toBe(204);
    expect(chat.headers.get("allow")).toBe("POST, OPTIONS");
    expect(chat.headers.get("x-request-id")).toBeTruthy();
    expect((await fetch(`${closed.url}/api/v1.0/chat/messages`, { method: "OPTIONS" })).headers.get("allow")).toBe("GET, HEAD, OPTIONS");
    expect((await fetch(`${closed.url}/no/such`, { method: "OPTIONS" })).status).toBe(404);
  });

  test("with no origins configured, a browser preflight is not granted", async () => {
    const response = await preflight(closed.url, "/api/v1.0/chat");
    expect(response.status).toBe(204);
    expect(response.headers.get("access-control-allow-origin")).toBeNull();
    const listed = await fetch(`${closed.url}/api/v1.0/chat/messages`, { headers: { ...bearer(alice.key), origin: APP } });
    expect(listed.status).toBe(200);
    expect(listed.headers.get("access-control-allow-origin")).toBeNull();
  });
});

describe("PARLEY_CORS_ORIGINS", () => {
  test("a listed origin's preflight is granted for the key and JSON; another origin's is not", async () => {
    const granted = await preflight(open.url, "/api/v1.0/chat");
    expect(granted.status).toBe(204);
    expect(granted.headers.get("access-control-allow-origin")).toBe(APP);
    expect(granted.headers.get("access-control-allow-methods")).toBe("POST, OPTIONS");
    expect(granted.headers.get("access-control-allow-headers")).toContain("authorization");
    expect(granted.headers.get("access-control-allow-headers")).toContain("content-type");
    expect(granted.headers.get("vary")).toBe("Origin");
    const refused = await preflight(open.url, "/api/v1.0/chat", "https://evil.example");
    expect(refused.headers.get("access-control-allow-origin")).toBeNull();
    expect(refused.headers.get("access-control-allow-methods")).toBeNull();
  });

  test("responses to a listed origin, errors included, may be read by its page", async () => {
    const listed = await fetch(`${open.url}/api/v1.0/chat/messages`, { headers: { ...bearer(alice.key), origin: APP } });
    expect(listed.status).toBe(200);
    expect(listed.headers.get("access-control-allow-origin")).toBe(APP);
    expect(listed.headers.get("access-control-expose-headers")).toContain("x-request-id");
    const refused = await fetch(`${open.url}/api/v1.0/chat/messages`, { headers: { origin: APP } });
    expect(refused.status).toBe(401);
    expect(refused.headers.get("access-control-allow-origin")).toBe(APP);
    const other = await fetch(`${open.url}/api/v1.0/chat/messages`, { headers: { ...bearer(alice.key), origin: "https://evil.example" } });
    expect(other.headers.get("access-control-allow-origin")).toBeNull();
  });

  test("* grants any origin", async () => {
    expect((await preflight(anyone.url, "/api/v1.0/chat", "https://anywhere.example")).headers.get("access-control-allow-origin")).toBe("*");
  });

  test("is a comma-separated list of origins; anything else stops start-up naming it", () => {
    expect(loadConfig({}).corsOrigins).toEqual([]);
    expect(loadConfig({ PARLEY_CORS_ORIGINS: "https://a.example, http://localhost:5173" }).corsOrigins).toEqual(["https://a.example", "http://localhost:5173"]);
    expect(() => loadConfig({ PARLEY_CORS_ORIGINS: "https://a.example/path" })).toThrow(ConfigError);
    expect(() => loadConfig({ PARLEY_CORS_ORIGINS: "a.example" })).toThrow(/^PARLEY_CORS_ORIGINS must list origins/);
  });
});
