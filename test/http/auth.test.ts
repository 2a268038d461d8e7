import { afterAll, describe, expect, test } from "bun:test";
import { serveApp, testDb } from "../support";

const db = testDb("auth");
const alice = await db.keys.create("alice", "user");
const revoked = await db.keys.create("alice", "user");
await db.keys.revoke(revoked.id);
const server = serveApp({ storage: db.storage });
afterAll(async () => {
  await server.stop();
  await db.storage.close();
});

const list = (headers: Record<string, string> = {}, query = "") =>
  fetch(`${server.url}/api/v1.0/chat/messages${query}`, { headers });

async function expect401(response: Response, tokenSent: boolean) {
  expect(response.status).toBe(401);
  expect(response.headers.get("www-authenticate")).toBe(
    tokenSent ? 'Bearer realm="parley", error="invalid_token"' : 'Bearer realm="parley"',
  );
  const body = (await response.json()) as { error: { code: string } };
  expect(body.error.code).toBe("unauthorized");
}

describe("authentication", () => {
  test("a valid key with the scheme in any case is accepted", async () => {
    for (const scheme of ["Bearer", "bearer", "BEARER", "bEaReR"]) {
      expect((await list({ authorization: `${scheme} ${alice.key}` })).status).toBe(200);
    }
  });

  test("missing header → 401 without error=", async () => {
    await expect401(await list(), false);
    await expect401(await list({ authorization: "" }), false);
  });

  test("another scheme → 401", async () => {
    await expect401(await list({ authorization: `Basic ${btoa(`alice:${alice.key}`)}` }), false);
    await expect401(await list({ authorization: alice.key }), false);
  });

  test("malformed bearer headers → 401 invalid_token", async () => {
    await expect401(await list({ authorization: `Bearer ${alice.key} ${alice.key}` }), true);
    await expect401(await list({ authorization: `Bearer ${alice.key},x` }), true);
    await expect401(await list({ authorization: "Bearer " }), false);
    await expect401(await list({ authorization: `Bearer${alice.key}` }), false);
  });

  test("unknown and revoked keys → 401 invalid_token", async () => {
    await expect401(await list({ authorization: `Bearer ${alice.key}x` }), true);
    await expect401(await list({ authorization: "Bearer pk_doesnotexist" }), true);
    await expect401(await list({ authorization: `Bearer ${revoked.key}` }), true);
  });

  test("tokens in the query string or body are not accepted", async () => {
    await expect401(await list({}, `?access_token=${alice.key}`), false);
    const chat = await fetch(`${server.url}/api/v1.0/chat`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ access_token: alice.key, message: "hi", conversation_id: "c" }),
    });
    await expect401(chat, false);
  });

  test("401 wins over a bad body: authentication runs before parsing", async () => {
    const chat = await fetch(`${server.url}/api/v1.0/chat`, {
      method: "POST",
      headers: { authorization: "Bearer nope", "content-type": "text/plain" },
      body: "{not json",
    });
    await expect401(chat, true);
  });

  test("operational endpoints need no key", async () => {
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  });

  test("using a key records when it was last used", async () => {
    const listed = (await db.keys.list()).find((row) => row.id === alice.id)!;
    expect(listed.lastUsedAt).toBeGreaterThan(0);
  });
});
