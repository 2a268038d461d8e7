/**
 * Event-loop health as a tested property (issue #62): while another client asks `/healthz` one
 * request after another, `parley serve` is sent, one after another, each request that costs the
 * most it may (the text limit in CJK, which tokenizes to the most tokens a character; a 30 MB
 * text-only body to a picture route; the hostile run's rerank placeholders; retrieval at its
 * character limits; schemas at SCHEMA_LIMITS; the most pictures at the largest pixel budget; the
 * CgBI bomb). Every probe's latency is kept: their p99 must stay under `HEALTH_P99_MS`, and the
 * server's resident memory must grow by less than `RSS_GROWTH_MB`: docs/operations.md,
 * "Event-loop health", states both. A real child process, so that what the probe sees is another
 * client's view, and its memory the server's alone.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { deflateRawSync } from "node:zlib";
import { PICTURE_LIMITS } from "../../src/chat/pictures";
import { RETRIEVAL_CHARACTERS } from "../../src/chat/retrieval";
import { VISION_MODEL_NAME } from "../../src/gguf/presets";
import { SCHEMA_LIMITS } from "../../src/llm/json-schema";
import { allowSlowTests, type ChildServer, compiledNatives, peakResident, presetModel, residentKb, startServer, tempDir } from "../support";
import { describeLatencies, HealthProbe, type HealthSample, latencies } from "../support/health-probe";
import { blackPng, ihdr, pngChunk, pngOf } from "../support/png";
import { visionPair } from "../support/vision";

allowSlowTests();

/** The bound docs/operations.md states: another client's `/healthz`, at the 99th percentile, whatever one request costs. */
const HEALTH_P99_MS = 250;
/** The server's resident memory after every case, against before them (models loaded and warmed): the bound docs/operations.md states. */
const RSS_GROWTH_MB = 1_024;
/** A refusal of a hostile body is quick: the hostile run's took 15–107 s. */
const REFUSAL_MS = 10_000;
/** Raised from the default 64 KiB, so that the retrieval limits, not the body's, bind: the text limit is then this much text. */
const BODY_LIMIT = 4 << 20;
/** Time for a case: scoring a thousand documents takes seconds on one thread of two busy cores. */
const CASE_MS = 180_000;
const ADMIN_KEY = "pk_event_loop_admin_key_0123456789";

const natives = await compiledNatives();
const CHAT = "parley-demo";
const EMBED = "parley-embed";
const RERANK = "parley-rerank";

let server: ChildServer;
let probe: HealthProbe;
let rssBefore = 0;
let peakRss = 0;
const bySample: { name: string; samples: HealthSample[]; ms: number; status: number }[] = [];

beforeAll(async () => {
  const paths = [await presetModel("demo"), await presetModel("embed"), await presetModel("rerank")];
  // The vision preset's projector lies beside it, where a scan pairs them.
  if (natives !== undefined) paths.push((await visionPair()).model);
  server = await startServer({
    adminKey: ADMIN_KEY,
    dbPath: join(tempDir("event-loop"), "parley.db"),
    timeoutMs: 60_000,
    env: {
      PARLEY_MODEL: paths.join(","),
      PARLEY_MAX_LOADED_MODELS: String(paths.length),
      PARLEY_KEEP_ALIVE_S: "-1",
      PARLEY_RATE_LIMIT: "0",
      PARLEY_BODY_LIMIT: String(BODY_LIMIT),
    },
  });
  // Every model loaded and each route's code run once, before anything is measured.
  for (const [path, body] of [
    ["/v1/chat/completions", { model: CHAT, messages: [{ role: "user", content: "hi" }], max_tokens: 2 }],
    ["/v1/embeddings", { model: EMBED, input: "hi" }],
    ["/v1/rerank", { model: RERANK, query: "hi", documents: ["hi"] }],
    ...(natives === undefined ? [] : [["/v1/chat/completions", { model: VISION_MODEL_NAME, messages: [{ role: "user", content: "hi" }], max_tokens: 2 }]]),
  ] as [string, object][]) {
    expect((await post(path, JSON.stringify(body))).status).toBe(200);
  }
  rssBefore = residentKb(server.pid).rss;
  probe = new HealthProbe(server.url);
}, 120_000);

afterAll(async () => {
  await server?.stop();
  await probe?.stop();
}, 60_000);

async function post(path: string, body: string | Uint8Array, signal?: AbortSignal): Promise<{ status: number; text: string }> {
  const response = await fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
    body,
    ...(signal ? { signal } : {}),
  });
  return { status: response.status, text: await response.text() };
}

/** Sends the body while the probe asks, the server's memory sampled meanwhile; keeps what the probe saw. */
async function watched(name: string, path: string, body: string | Uint8Array, signal?: AbortSignal): Promise<{ status: number; text: string; ms: number }> {
  const started = performance.now();
  const { value, samples } = await probe.during(async () => {
    const { result, peak } = await peakResident(server.pid, () => post(path, body, signal));
    peakRss = Math.max(peakRss, peak.rss);
    return result;
  });
  const ms = performance.now() - started;
  bySample.push({ name, samples, ms, status: value.status });
  console.log(`${name}: ${value.status} in ${ms.toFixed(0)} ms; /healthz ${describeLatencies(latencies(samples))}`);
  expect(samples.every((sample) => sample.status === 200)).toBe(true);
  // A case quicker than the probes' pace may have none in flight: it held nothing up long enough to meet one.
  if (samples.length > 0) expect(latencies(samples).p99).toBeLessThan(HEALTH_P99_MS);
  return { ...value, ms };
}

/** A JSON body of `build(text)` with `text` the most of `unit` that keeps the body within `limit` bytes. */
function filled(build: (text: string) => object, unit: string, limit = BODY_LIMIT): string {
  const overhead = Buffer.byteLength(JSON.stringify(build("")));
  return JSON.stringify(build(unit.repeat(Math.floor((limit - overhead) / Buffer.byteLength(unit)))));
}

/**
 * Each protocol's request of one message of `text`, a few tokens long, and its status at the text
 * limit: a chat turn's message is cut to its end that fits; a legacy prompt is never cut, and one
 * that cannot fit is refused before it is tokenized.
 */
const AT_TEXT_LIMIT: [string, (text: string) => object, number][] = [
  ["/v1/chat/completions", (content) => ({ model: CHAT, messages: [{ role: "user", content }], max_tokens: 4 }), 200],
  ["/v1/responses", (input) => ({ model: CHAT, input, max_output_tokens: 4, store: false }), 200],
  ["/v1/messages", (content) => ({ model: CHAT, messages: [{ role: "user", content }], max_tokens: 4 }), 200],
  ["/api/chat", (content) => ({ model: CHAT, messages: [{ role: "user", content }], stream: false, options: { num_predict: 4 } }), 200],
  ["/api/generate", (prompt) => ({ model: CHAT, prompt, stream: false, options: { num_predict: 4 } }), 200],
  ["/v1/completions", (prompt) => ({ model: CHAT, prompt, max_tokens: 4 }), 400],
];
/** The characters a native API message may have (docs/API.md). */
const NATIVE_MESSAGE_LIMIT = 16_000;
/** Tokenizes to about three tokens a character on these models: the most a character costs. */
const CJK = "漢";

describe("another client's /healthz while each request costs the most it may", () => {
  describe("text at the text limit, and past it on a picture route", () => {
    test(
      "the native API: a message of CJK at its 16,000 characters is answered",
      async () => {
        const body = JSON.stringify({ conversation_id: "el-native", message: CJK.repeat(NATIVE_MESSAGE_LIMIT), max_tokens: 4, stream: false });
        expect((await watched("text limit, /api/v1.0/chat", "/api/v1.0/chat", body)).status).toBe(200);
      },
      CASE_MS,
    );

    for (const [path, build, status] of AT_TEXT_LIMIT) {
      test(
        `${path}: a message of CJK at PARLEY_BODY_LIMIT is ${status === 200 ? "answered, cut to its end that fits" : "refused, as no legacy prompt is cut"}`,
        async () => {
          const body = filled(build, CJK);
          expect(Buffer.byteLength(body)).toBeGreaterThan(BODY_LIMIT - 3);
          const answer = await watched(`text limit, ${path}`, path, body);
          expect({ status: answer.status, text: answer.text.slice(0, 300) }).toMatchObject({ status });
        },
        CASE_MS,
      );
    }

    test(
      "a 30 MB text-only body to a picture route is 413: its text is over PARLEY_BODY_LIMIT",
      async () => {
        const content = "a".repeat(30_000_000);
        for (const path of ["/v1/chat/completions", "/api/chat"]) {
          const body = JSON.stringify({ model: CHAT, messages: [{ role: "user", content }], stream: false });
          expect((await watched(`30 MB of text, ${path}`, path, body)).status).toBe(413);
        }
      },
      CASE_MS,
    );
  });

  describe("retrieval at its limits", () => {
    test(
      "the hostile run's rerank placeholders are a quick 400",
      async () => {
        const body = JSON.stringify({ model: RERANK, query: "{document}".repeat(3000), documents: ["abcdefgh ".repeat(3300)] });
        const { status, ms } = await watched("rerank placeholders", "/v1/rerank", body);
        expect(status).toBe(400);
        expect(ms).toBeLessThan(REFUSAL_MS);
      },
      CASE_MS,
    );

    test(
      "1,024 documents: scored when short; at the request's characters, each tokenized before the last is refused",
      async () => {
        const short = { model: RERANK, query: "which one", documents: Array.from({ length: 1024 }, (_, i) => `document number ${i}`) };
        expect((await watched("rerank, 1,024 short documents", "/v1/rerank", JSON.stringify(short))).status).toBe(200);
        // Each document with the query takes its share of the characters; the last, in CJK, more tokens than an input may have.
        const each = Math.floor(RETRIEVAL_CHARACTERS.request / 1024) - 1;
        const documents = [...Array.from({ length: 1023 }, (_, i) => `${i} ${"word ".repeat(each / 5)}`.slice(0, each)), CJK.repeat(each)];
        const body = JSON.stringify({ model: RERANK, query: "q", documents });
        const { status, text } = await watched("rerank, 1,024 documents at the characters' limit", "/v1/rerank", body);
        expect({ status, text }).toMatchObject({ status: 400, text: expect.stringContaining("documents[1023]") });
      },
      CASE_MS,
    );

    test(
      "2,048 inputs: embedded when short; at the request's characters, each tokenized before the last is refused; one text at its limit, cut",
      async () => {
        const short = { model: EMBED, input: Array.from({ length: 2048 }, (_, i) => `input number ${i}`) };
        expect((await watched("embeddings, 2,048 short inputs", "/v1/embeddings", JSON.stringify(short))).status).toBe(200);
        const each = Math.floor(RETRIEVAL_CHARACTERS.request / 2048) - 1;
        const last = CJK.repeat(RETRIEVAL_CHARACTERS.request - 2047 * each);
        const input = [...Array.from({ length: 2047 }, (_, i) => `${i} ${"word ".repeat(each / 5)}`.slice(0, each)), last];
        const { status, text } = await watched("embeddings, 2,048 inputs at the characters' limit", "/v1/embeddings", JSON.stringify({ model: EMBED, input }));
        expect({ status, text }).toMatchObject({ status: 400, text: expect.stringContaining("input[2047]") });
        const cut = { model: EMBED, input: CJK.repeat(RETRIEVAL_CHARACTERS.text), truncate: true };
        expect((await watched("Ollama embed, one CJK text at its limit, truncated", "/api/embed", JSON.stringify(cut))).status).toBe(200);
      },
      CASE_MS,
    );
  });

  test(
    "the largest schema: held to as a reply format; as a tool's parameters, shown to the model, refused by its prompt's size",
    async () => {
      const ask = (name: string, body: object) =>
        watched(
          `largest schema, ${name}`,
          "/v1/chat/completions",
          JSON.stringify({ model: CHAT, messages: [{ role: "user", content: "Hello" }], max_tokens: 4, ...body }),
        );
      const format = await ask("reply format", { response_format: { type: "json_schema", json_schema: { name: "x", schema: LARGEST_SCHEMA } } });
      expect({ status: format.status, text: format.text.slice(0, 300) }).toMatchObject({ status: 200 });
      const tool = await ask("tool parameters", { tools: [{ type: "function", function: { name: "f", parameters: LARGEST_SCHEMA } }] });
      expect(tool).toMatchObject({ status: 400, text: expect.stringContaining('"param":"tools"') });
    },
    CASE_MS,
  );

  describe.skipIf(natives === undefined)("pictures, on the vision preset", () => {
    test(
      "the most pictures a request may have, at the largest pixel budget, on OpenAI's chat and the native API",
      async () => {
        const side = Math.sqrt(PICTURE_LIMITS.requestPixels / PICTURE_LIMITS.perRequest);
        const url = `data:image/png;base64,${Buffer.from(blackPng(side, side)).toString("base64")}`;
        const openAi = {
          model: VISION_MODEL_NAME,
          max_tokens: 4,
          messages: [
            {
              role: "user",
              content: [
                { type: "text", text: "What is in these?" },
                ...Array.from({ length: PICTURE_LIMITS.perRequest }, () => ({ type: "image_url", image_url: { url } })),
              ],
            },
          ],
        };
        const openAiAnswer = await watched(`${PICTURE_LIMITS.perRequest} pictures of ${side}², OpenAI chat`, "/v1/chat/completions", JSON.stringify(openAi));
        expect({ status: openAiAnswer.status, text: openAiAnswer.text.slice(0, 300) }).toMatchObject({ status: 200 });
        // The native API takes fewer pictures, each as large as a picture may be, to the same budget.
        const largest = Buffer.from(blackPng(Math.sqrt(PICTURE_LIMITS.pixels), Math.sqrt(PICTURE_LIMITS.pixels))).toString("base64");
        const count = PICTURE_LIMITS.requestPixels / PICTURE_LIMITS.pixels;
        const native = {
          conversation_id: "el-pictures",
          model: VISION_MODEL_NAME,
          message: "What is in these?",
          images: Array(count).fill(largest),
          max_tokens: 4,
          stream: false,
        };
        const nativeAnswer = await watched(`${count} pictures of ${Math.sqrt(PICTURE_LIMITS.pixels)}², native API`, "/api/v1.0/chat", JSON.stringify(native));
        expect({ status: nativeAnswer.status, text: nativeAnswer.text.slice(0, 300) }).toMatchObject({ status: 200 });
      },
      CASE_MS,
    );

    test(
      "the CgBI bomb (a 1×1 CgBI chunk before a 16384×16384 IHDR) is a quick 400",
      async () => {
        const side = 16_384;
        const bomb = pngOf([
          pngChunk("CgBI", ihdr(1, 1)),
          pngChunk("IHDR", ihdr(side, side, "grey")),
          pngChunk("IDAT", deflateRawSync(new Uint8Array(side * (side + 1)))),
        ]);
        const body = JSON.stringify({
          model: VISION_MODEL_NAME,
          max_tokens: 4,
          messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: `data:image/png;base64,${Buffer.from(bomb).toString("base64")}` } }] }],
        });
        const { status, ms } = await watched("CgBI bomb", "/v1/chat/completions", body);
        expect(status).toBe(400);
        expect(ms).toBeLessThan(REFUSAL_MS);
      },
      CASE_MS,
    );
  });

  test(`every case: /healthz p99 under ${HEALTH_P99_MS} ms, the server's memory grown by less than ${RSS_GROWTH_MB} MB, nothing logged at error level`, () => {
    const all = bySample.flatMap(({ samples }) => samples);
    const rssAfter = residentKb(server.pid).rss;
    console.log(
      `event loop: all cases, /healthz ${describeLatencies(latencies(all))}; RSS before ${Math.round(rssBefore / 1024)} MB, peak ${Math.round(peakRss / 1024)} MB, after ${Math.round(rssAfter / 1024)} MB`,
    );
    expect(bySample.length).toBeGreaterThan(0);
    expect(latencies(all).p99).toBeLessThan(HEALTH_P99_MS);
    expect((rssAfter - rssBefore) / 1024).toBeLessThan(RSS_GROWTH_MB);
    expect(server.errorLines).toEqual([]);
  });
});

/**
 * One schema at every limit at once: nested to the depth limit, repetitions at their limit, and
 * enum values filling the elements that nesting leaves.
 */
const LARGEST_SCHEMA: object = (() => {
  const leaf = {
    type: "object",
    properties: {
      list: { type: "array", items: { type: "integer" }, maxItems: SCHEMA_LIMITS.repetition },
      text: { type: "string", maxLength: SCHEMA_LIMITS.repetition },
      choice: { enum: Array.from({ length: SCHEMA_LIMITS.elements - 2 * SCHEMA_LIMITS.depth - 8 }, (_, i) => `v${i}`) },
    },
    required: ["list", "text", "choice"],
  };
  let schema: object = leaf;
  for (let level = 2; level < SCHEMA_LIMITS.depth - 1; level++) schema = { type: "object", properties: { a: schema }, required: ["a"] };
  return schema;
})();
