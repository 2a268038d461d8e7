/**
 * A checkout serving on the npm prebuilt (no compiled natives in its cache, no build) tells the
 * truth: the listings say the vision model sees no pictures here, a draft model, a projector and
 * the KV memory tier each get a line at start naming `bun run natives`, and a request for pictures
 * or log-probabilities is a 4xx naming it.
 */
import { afterAll, expect, test } from "bun:test";
import { allowSlowTests, bearer, type ChildServer, presetModel, startServer, tempDir } from "../support";
import { VISION_IMAGES, visionPair } from "../support/vision";

allowSlowTests();

const adminKey = "prebuilt-truth-admin-key-0123456789abcdef";
let server: ChildServer | undefined;
afterAll(() => server?.child.kill("SIGKILL"));

const post = (path: string, body: unknown) =>
  fetch(`${server!.url}${path}`, { method: "POST", headers: { ...bearer(adminKey), "content-type": "application/json" }, body: JSON.stringify(body) });

test("on the prebuilt: no vision listed, a start line for each missing feature, and 4xx naming bun run natives", async () => {
  const { model, projector } = await visionPair();
  server = await startServer({
    adminKey,
    env: {
      XDG_CACHE_HOME: tempDir("empty-natives-cache"),
      PARLEY_MODEL: `${model}+${projector}`,
      PARLEY_DRAFT_MODEL: await presetModel("bench-draft"),
      PARLEY_KV_RAM_MB: "16",
    },
  });
  const warnings = server.lines.filter((line) => line.includes('"level":"warn"')).join("\n");
  expect(warnings).toContain("Parley's compiled natives are not built: serving on the npm prebuilt");
  expect(warnings).toMatch(
    /"reason":"speculation needs Parley's compiled natives \(`bun run natives`\)[^"]*","msg":"the draft model bench-draft[^"]*\.gguf is not loaded"/,
  );
  expect(warnings).toMatch(
    /"reason":"pictures need Parley's compiled natives[^"]*`bun run natives`[^"]*","msg":"the projector mmproj-[^"]*\.gguf is not loaded"/,
  );
  expect(warnings).toContain("keeping them in memory (PARLEY_KV_RAM_MB) needs Parley's compiled natives");

  const models = (await (await fetch(`${server.url}/v1/models`, { headers: bearer(adminKey) })).json()) as { data: { id: string; vision?: boolean }[] };
  const vision = models.data.find((model) => model.id === "parley-vision");
  expect(vision?.vision).toBe(false);
  const show = (await (await post("/api/show", { model: "parley-vision" })).json()) as { capabilities: string[] };
  expect(show.capabilities).not.toContain("vision");

  const picture = Buffer.from(VISION_IMAGES[Object.keys(VISION_IMAGES)[0]!]!()).toString("base64");
  const pictured = await post("/v1/chat/completions", {
    model: "parley-vision",
    messages: [
      {
        role: "user",
        content: [
          { type: "text", text: "What is this?" },
          { type: "image_url", image_url: { url: `data:image/png;base64,${picture}` } },
        ],
      },
    ],
    max_tokens: 2,
  });
  expect(pictured.status).toBeGreaterThanOrEqual(400);
  expect(pictured.status).toBeLessThan(500);
  expect(((await pictured.json()) as { error: { message: string } }).error.message).toContain("bun run natives");
  const logprobs = await post("/v1/chat/completions", { model: "parley-vision", messages: [{ role: "user", content: "Hi" }], max_tokens: 2, logprobs: true });
  expect(logprobs.status).toBe(400);
  expect(((await logprobs.json()) as { error: { message: string } }).error.message).toContain("bun run natives");
});
