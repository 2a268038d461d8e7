import { afterAll, describe, expect, test } from "bun:test";
import { Unauthorized } from "../../src/errors";
import { authenticate } from "../../src/http/auth";
import { allowSlowTests, median, serveApp, testDb } from "../support";

allowSlowTests();

const db = testDb("auth");
const alice = await db.keys.create("alice", "user");
const revoked = await db.keys.create("alice", "user");
await db.keys.revoke(revoked.id);
const server = serveApp({ storage: db.storage });
afterAll(async () => {
  await server.stop();
  await db.storage.close();
});

const list = (headers: Record<string, string> = {}, query = "") => fetch(`${server.url}/api/v1.0/chat/messages${query}`, { headers });

async function expect401(response: Response, tokenSent: boolean) {
  expect(response.status).toBe(401);
  expect(response.headers.get("www-authenticate")).toBe(tokenSent ? 'Bearer realm="parley", error="invalid_token"' : 'Bearer realm="parley"');
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

describe("key check timing", () => {
  test("a key wrong only in its last character is refused as fast as one wrong in every character", async () => {
    const flip = (c: string) => (c === "A" ? "B" : "A");
    const headers = {
      "last character": `Bearer ${alice.key.slice(0, -1)}${flip(alice.key.at(-1)!)}`,
      "every character": `Bearer ${[...alice.key].map(flip).join("")}`,
    };
    for (const header of Object.values(headers)) {
      await expect(authenticate(db.keys, header)).rejects.toBeInstanceOf(Unauthorized);
    }
    const CALLS = 100;
    const batch = async (header: string) => {
      const started = performance.now();
      for (let i = 0; i < CALLS; i++) await authenticate(db.keys, header).catch(() => undefined);
      return (performance.now() - started) / CALLS;
    };
    const kinds = Object.keys(headers) as (keyof typeof headers)[];
    const samples = { "last character": [] as number[], "every character": [] as number[] };
    await batch(headers["every character"]); // warm-up
    // Interleaved, first one kind then the other first, so drift in machine load hits both alike;
    // the median of many batches ignores the batches a busy machine interrupted.
    for (let i = 0; i < 100; i++) {
      for (const kind of i % 2 ? kinds : [...kinds].reverse()) samples[kind].push(await batch(headers[kind]));
    }
    const nearly = median(samples["last character"]);
    const wholly = median(samples["every character"]);
    console.log(
      `key check: median ${(nearly * 1000).toFixed(1)} µs (wrong last character) vs ${(wholly * 1000).toFixed(1)} µs (wrong everywhere), 100 batches of ${CALLS}`,
    );
    // The key is hashed before the lookup, so how much of it was right cannot show. A
    // character-by-character comparison would be below this tolerance, but a short-circuit that
    // skipped or added work for a near miss (a second query, a prefix lookup) would not.
    expect(Math.abs(nearly - wholly)).toBeLessThan(0.25 * Math.min(nearly, wholly));
  });
});
