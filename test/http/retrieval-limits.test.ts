/**
 * Retrieval's work is bounded before it is done (issue #62): a ranking query holding a
 * placeholder's text is written into the ranking prompt as text, not expanded once per document;
 * texts past `RETRIEVAL_CHARACTERS` are refused by name before they are tokenized; and tokenizing
 * up to those limits leaves `/healthz` answering another client.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { RETRIEVAL_CHARACTERS } from "../../src/chat/retrieval";
import { allowSlowTests, presetModel, type ServedModelsApp, serveModels, testDb } from "../support";
import { watchLoop } from "../support/event-loop";

allowSlowTests();

const RERANK = "parley-rerank";
const EMBED = "parley-embed";
/**
 * Generous bounds on what another client waits for `/healthz`, and on the time a refusal takes:
 * they guard the design (bounded work, tokenizing in slices), not a speed. The hostile run saw
 * 61–107 s for the 60 KB body below, and `/healthz` waiting ~60 s meanwhile.
 */
const HEALTH_MS = 1_000;
const REFUSAL_MS = 10_000;

const db = testDb("retrieval-limits");
let service: ServedModelsApp;
let key: string;

const post = (path: string, body: unknown) =>
  fetch(`${service.served.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });

/** The refusal's status and OpenAI-shaped error, what another client's `/healthz` waited meanwhile, and how long it took. */
async function watchedRefusal(path: string, body: unknown) {
  const started = performance.now();
  const { value, worstDelayMs, worstHealthMs } = await watchLoop(service.served.url, async () => {
    const response = await post(path, body);
    const { error } = (await response.json()) as { error: { param: string | null; message: string } };
    return { status: response.status, ...error };
  });
  const ms = performance.now() - started;
  console.log(
    `${path} refused (${value.status} ${value.param}) in ${ms.toFixed(0)} ms; loop late ${worstDelayMs.toFixed(0)} ms, /healthz ${worstHealthMs.toFixed(0)} ms`,
  );
  expect(worstHealthMs).toBeLessThan(HEALTH_MS);
  expect(ms).toBeLessThan(REFUSAL_MS);
  return value;
}

beforeAll(async () => {
  ({ key } = await db.keys.create("alice", "user"));
  service = await serveModels({
    storage: db.storage,
    paths: [await presetModel("demo"), await presetModel("embed"), await presetModel("rerank")],
    max: 3,
    keepAliveMs: -1,
    // Room for a text past the characters one text may have.
    limits: { bodyLimitBytes: 1 << 20 },
  });
});
afterAll(async () => {
  await service.stop();
  await db.storage.close();
});

describe("reranking", () => {
  test("the hostile run's 60 KB body (a query of 3,000 {document}s): 400 naming documents[0] at once, its tokens the texts' own", async () => {
    const body = { model: RERANK, query: "{document}".repeat(3000), documents: ["abcdefgh ".repeat(3300)] };
    expect(JSON.stringify(body).length).toBeGreaterThan(59_000);
    const refusal = await watchedRefusal("/v1/rerank", body);
    expect(refusal).toMatchObject({ status: 400, param: "documents[0]" });
    // Expanded, the document is written into the prompt 3,000 times: 69,323,179 tokens.
    const tokens = Number(/has (\d+) tokens with the query/.exec(refusal.message)?.[1]);
    expect(tokens).toBeGreaterThan(1024);
    expect(tokens).toBeLessThan(60_000);
  });

  test("the query counts once per document: the document that takes the request past its characters is refused by name", async () => {
    const query = "q".repeat(3000);
    const each = query.length + 1;
    const refusal = await watchedRefusal("/v1/rerank", { model: RERANK, query, documents: Array.from({ length: 1024 }, () => "d") });
    expect(refusal).toMatchObject({ status: 400, param: `documents[${Math.floor(RETRIEVAL_CHARACTERS.request / each)}]` });
    expect(refusal.message).toContain(`more than the ${RETRIEVAL_CHARACTERS.request} a request may have`);
  });

  test("just within the characters, every document is tokenized with /healthz answering meanwhile; the last one's tokens are too many", async () => {
    const query = "word ".repeat(400);
    const documents = [...Array.from({ length: 1023 }, (_, i) => `document ${i}`), "word ".repeat(1000)];
    expect(documents.reduce((sum, document) => sum + query.length + document.length, 0)).toBeGreaterThan(RETRIEVAL_CHARACTERS.request * 0.95);
    expect(await watchedRefusal("/v1/rerank", { model: RERANK, query, documents })).toMatchObject({ status: 400, param: "documents[1023]" });
  });
});

describe("embeddings", () => {
  test("a text past the characters one may have is refused by name, or cut before tokenizing where Ollama's truncate asks", async () => {
    const long = "word ".repeat(RETRIEVAL_CHARACTERS.text / 5 + 1);
    const refusal = await watchedRefusal("/v1/embeddings", { model: EMBED, input: ["short", long] });
    expect(refusal).toMatchObject({ status: 400, param: "input[1]" });
    expect(refusal.message).toContain(`more than the ${RETRIEVAL_CHARACTERS.text} one text may have`);
    const cut = await post("/api/embed", { model: EMBED, input: long });
    expect(cut.status).toBe(200);
    expect(((await cut.json()) as { prompt_eval_count: number }).prompt_eval_count).toBe(1024);
  });
});
