/**
 * Code completion on the qwen2-coder preset (Qwen2.5-Coder's FIM tokens): llama-server's `/infill`
 * as llama.vscode and llama.vim call it, `suffix` on `/v1/completions` through the openai SDK and on
 * `/api/generate` through the `ollama` client, and `raw` there. Each prompt is llama-server's
 * token for token on the same file (its answers kept in test/fixtures by tools/infill-fixture.ts),
 * plain and streamed; `n_indent` ends a completion where llama-server's ends it (on a model whose
 * completion has indented lines) and `t_max_predict_ms` at a line's end; a model without FIM
 * tokens refuses them by the field; keys, quotas and metrics as on every route.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { getLlama, type Llama, type LlamaModel } from "node-llama-cpp";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { TokenLedger } from "../../src/chat/token-ledger";
import { familyGguf, familyModelName } from "../../src/gguf/families";
import { gguf } from "../../src/gguf/values";
import { writeGguf } from "../../src/gguf/writer";
import type { Engine } from "../../src/llm/engine";
import { fimTokensOf, infillTokens } from "../../src/llm/infill";
import { Metrics } from "../../src/metrics";
import {
  allowSlowTests,
  bearer,
  fileSha256,
  type Generation,
  observeGenerations,
  presetModel,
  readSse,
  rejection,
  type Served,
  serveApp,
  servedDocument,
  servedEngine,
  tempDir,
  testDb,
  testEngine,
} from "../support";
import {
  CHAIN_BODY,
  CHAIN_CASES,
  CHAIN_SEEDS,
  INDENT_BODY,
  INDENT_CASES,
  INFILL_BATCH,
  INFILL_CASES,
  INFILL_CONTEXT,
  INFILL_PREDICT,
  type InfillCase,
  type InfillFixture,
  indentModelGguf,
  readInfillFixture,
} from "../support/infill";

allowSlowTests();

const MODEL = familyModelName("qwen2-coder");
const db = testDb("infill");
let engine: Engine;
const metrics = new Metrics({ engines: () => [engine], turns: () => 0 });
let fixture: InfillFixture;
let server: Served;
let key: string;
let userId: number;
let generations: Generation[];

beforeAll(async () => {
  fixture = await readInfillFixture();
  // The fixture was made on this very file: a preset whose bytes changed needs tools/infill-fixture.ts run again.
  expect(await fileSha256(await presetModel("qwen2-coder"))).toBe(fixture.sha256);
  ({ key, userId } = await db.keys.create("alice", "user"));
  engine = await testEngine({ preset: "qwen2-coder", parallel: 2, contextSize: INFILL_CONTEXT, batchSize: INFILL_BATCH });
  generations = observeGenerations(engine);
  server = serveApp({ storage: db.storage, engine, metrics, ledger: new TokenLedger(db.storage.usage, db.storage.quotas) });
});
afterAll(async () => {
  await server.stop();
  await engine.close();
  await db.storage.close();
});

const infill = (body: object, auth = key) =>
  fetch(`${server.url}/infill`, { method: "POST", headers: { ...bearer(auth), "content-type": "application/json" }, body: JSON.stringify(body) });

const greedy = (c: InfillCase) => ({ ...c.body, n_predict: INFILL_PREDICT, temperature: 0 });

/** The prompt the engine evaluated last, as llama-server writes one (special tokens' texts). */
const lastPrompt = () => generations.at(-1)!.result.prompt;

describe("the prompt of an infill", () => {
  let llama: Llama;
  let model: LlamaModel;
  beforeAll(async () => {
    llama = await getLlama({ gpu: false, build: "never" });
    model = await llama.loadModel({ modelPath: await presetModel("qwen2-coder") });
  });
  afterAll(async () => {
    await model.dispose();
    await llama.dispose();
  });

  test("is llama-server's token for token: repository and file lines, each text tokenized alone, the cuts to the batch and the context", () => {
    const fim = fimTokensOf(model)!;
    // Found by their texts, as llama.cpp finds them in a file converted from Qwen2.5-Coder (no fim_* keys).
    expect(model.fileInfo.metadata.tokenizer.ggml).not.toHaveProperty("fim_pre_token_id");
    expect(Object.keys(fim).sort()).toEqual(["file", "middle", "prefix", "repository", "suffix"]);
    for (const { name, body } of INFILL_CASES) {
      const files = (body.input_extra ?? []).map((file) => ({ name: file.filename ?? "tmp", text: file.text }));
      const tokens = infillTokens({ before: body.input_prefix, after: body.input_suffix, start: body.prompt ?? "", files }, fim, model.tokenizer, {
        batch: INFILL_BATCH,
        context: INFILL_CONTEXT,
        budget: INFILL_CONTEXT - 1 - INFILL_PREDICT,
      });
      expect({ name, tokens: tokens as number[] }).toEqual({ name, tokens: fixture.answers[name]!.tokens });
    }
  });

  test("named by the file's fim_* keys where it has them, which llama.cpp reads before the tokens' texts", async () => {
    const id = (text: string) => model.tokenize(text, true)[0]!;
    const [prefix, suffix, middle, repository, file] = ["<|fim_suffix|>", "<|fim_prefix|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>"].map(id);
    const written = familyGguf("qwen2-coder");
    const path = join(tempDir("infill-keys"), "keyed.gguf");
    const key = (name: string, token: number | undefined) => ({ [`tokenizer.ggml.fim_${name}_token_id`]: gguf.u32(token!) });
    const metadata = { ...key("pre", prefix), ...key("suf", suffix), ...key("mid", middle), ...key("rep", repository), ...key("sep", file) };
    await writeGguf(path, { ...written, metadata: { ...written.metadata, ...metadata } });
    const keyed = await llama.loadModel({ modelPath: path });
    try {
      expect(fimTokensOf(keyed)).toEqual({ prefix, suffix, middle, repository, file } as never);
    } finally {
      await keyed.dispose();
    }
  });
});

describe("POST /infill", () => {
  test("each case: llama-server's prompt and greedy completion, plain and streamed", async () => {
    for (const c of INFILL_CASES) {
      const expected = fixture.answers[c.name]!;
      const response = await infill(greedy(c));
      expect(response.status).toBe(200);
      const body = (await response.json()) as { content: string; tokens_evaluated: number; stop: boolean; timings: { prompt_n: number } };
      expect({ case: c.name, content: body.content, evaluated: body.tokens_evaluated, prompt: lastPrompt() }).toEqual({
        case: c.name,
        content: expected.content,
        evaluated: expected.tokens.length,
        prompt: expected.prompt,
      });
      expect(body.stop).toBe(true);

      const streamed = await infill({ ...greedy(c), stream: true });
      expect(streamed.headers.get("content-type")).toStartWith("text/event-stream");
      const events: { content: string; stop: boolean; tokens_evaluated: number }[] = [];
      for await (const event of readSse(streamed)) if (event.event !== "comment") events.push(event.data as (typeof events)[number]);
      expect(events.at(-1)).toMatchObject({ stop: true, content: "", tokens_evaluated: expected.tokens.length });
      expect(events.slice(0, -1).every((event) => event.stop === false)).toBe(true);
      expect({ case: c.name, streamed: events.map((event) => event.content).join(""), prompt: lastPrompt() }).toEqual({
        case: c.name,
        streamed: expected.streamed,
        prompt: expected.prompt,
      });
    }
  });

  test("its answers are those the served OpenAPI document gives: the JSON, each streamed event, a refusal", async () => {
    const spec = await servedDocument(server.url);
    spec.expectDocumented("/infill", "post", 200, await (await infill(greedy(INFILL_CASES[1]!))).json());
    const events = (await (await infill({ ...greedy(INFILL_CASES[1]!), stream: true })).text())
      .split("\n\n")
      .filter((event) => event.startsWith("data: {"))
      .map((event) => JSON.parse(event.slice("data: ".length)) as unknown);
    expect(events.length).toBeGreaterThan(2);
    for (const event of events.slice(0, -1)) spec.expectValid(spec.schemaAt("components", "schemas", "InfillChunk"), event, "a piece");
    spec.expectValid(spec.schemaAt("components", "schemas", "InfillResponse"), events.at(-1), "the last event");
    spec.expectDocumented("/infill", "post", 400, await (await infill({ input_prefix: "", input_suffix: "", n_predict: 0 })).json());
  });

  test("the same prompt again is served from the cache; response_fields picks values by their paths, as llama.vim asks", async () => {
    const c = INFILL_CASES[1]!;
    await infill(greedy(c));
    const response = await infill({ ...greedy(c), response_fields: ["content", "timings/prompt_n", "timings/cache_n", "tokens_cached", "no/such"] });
    const body = (await response.json()) as Record<string, number | string>;
    expect(Object.keys(body).sort()).toEqual(["content", "timings/cache_n", "timings/prompt_n", "tokens_cached"]);
    expect(body.content).toBe(fixture.answers[c.name]!.content);
    expect(body["timings/cache_n"]).toBeGreaterThan(0);
    expect(body["timings/prompt_n"]).toBe(fixture.answers[c.name]!.tokens.length - (body["timings/cache_n"] as number));
  });

  test("llama.vscode's request as it sends it; llama-server's default chain too", async () => {
    const request = {
      input_prefix: "def add(a, b):\n    ",
      input_suffix: "\n",
      input_extra: [],
      prompt: "",
      n_predict: 3,
      top_k: 40,
      top_p: 0.99,
      stream: false,
      n_indent: 4,
      samplers: ["top_k", "top_p", "infill"],
      cache_prompt: true,
      t_max_prompt_ms: 500,
      t_max_predict_ms: 1000,
    };
    const defaults = ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"];
    for (const samplers of [request.samplers, defaults, undefined]) {
      const response = await infill({ ...request, samplers });
      expect(response.status).toBe(200);
      expect(await response.json()).toMatchObject({ tokens_predicted: 3, stop_type: "limit" });
    }
  });

  test("bad input is refused by its field; an unknown field too", async () => {
    const cases: [object, string][] = [
      [{ input_suffix: "" }, "input_prefix"],
      [{ input_prefix: "", input_suffix: "", input_extra: [{ filename: "a.py" }] }, "input_extra"],
      [{ input_prefix: "", input_suffix: "", n_predict: 0 }, "n_predict"],
      [{ input_prefix: "", input_suffix: "", return_tokens: true }, "return_tokens"],
      [{ input_prefix: "", input_suffix: "", samplers: ["temperature", "top_k"] }, "samplers[1]"],
      [{ input_prefix: "", input_suffix: "", samplers: ["infill", "infill"] }, "samplers[1]"],
      [{ input_prefix: "", input_suffix: "", samplers: ["mirostat"] }, "samplers[0]"],
      [{ input_prefix: "", input_suffix: "", n_indent: -1 }, "n_indent"],
      [{ input_prefix: "", input_suffix: "", prompt: "x".repeat(20_000) }, "prompt"],
    ];
    for (const [body, param] of cases) {
      const response = await infill(body);
      const { error } = (await response.json()) as { error: { param: string } };
      expect({ status: response.status, param: error.param.slice(0, param.length) }).toEqual({ status: 400, param });
    }
  });

  test("needs a key; counts to the user's quota; metered as every route", async () => {
    expect((await infill(greedy(INFILL_CASES[0]!), "pk_not_a_key")).status).toBe(401);
    await db.storage.quotas.set(userId, { tokens: 1_000_000, period: "day" });
    try {
      const response = await infill(greedy(INFILL_CASES[0]!));
      expect(response.status).toBe(200);
      const body = (await response.json()) as { tokens_evaluated: number; tokens_predicted: number };
      const remaining = Number(response.headers.get("x-quota-remaining"));
      expect(remaining).toBeLessThanOrEqual(1_000_000 - body.tokens_evaluated - body.tokens_predicted);
      await db.storage.quotas.set(userId, { tokens: 1, period: "day" });
      expect((await infill(greedy(INFILL_CASES[0]!))).status).toBe(429);
    } finally {
      await db.storage.quotas.clear(userId);
    }
    const requests = await metrics.registry.getSingleMetricAsString("parley_http_requests_total");
    expect(requests).toMatch(/route="\/infill",method="POST",status="200"} [1-9]/);
  });
});

describe("lines that end a completion: n_indent and t_max_predict_ms", () => {
  const path = join(tempDir("infill-indent"), "indent.gguf");
  beforeAll(() => writeGguf(path, indentModelGguf()));
  const indent = servedEngine("infill-indent", { modelPath: path, contextSize: INFILL_CONTEXT, batchSize: INFILL_BATCH });
  const post = (body: object) =>
    fetch(`${indent.served.url}/infill`, {
      method: "POST",
      headers: { ...bearer(indent.key), "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  type Answer = { content: string; stop_type: string; has_new_line: boolean; truncated: boolean; tokens_predicted: number };
  const streamed = async (body: object) => {
    const events: (Answer & { stop: boolean })[] = [];
    for await (const event of readSse(await post({ ...body, stream: true }))) if (event.event !== "comment") events.push(event.data as (typeof events)[number]);
    return { content: events.map((event) => event.content).join(""), last: events.at(-1)! };
  };

  test("n_indent: llama-server's content, stop type and counts, plain and streamed; a stream never shows the line cut", async () => {
    // The fixture was made on this very file: a model whose bytes changed needs tools/infill-fixture.ts run again.
    expect(await fileSha256(path)).toBe(fixture.indent.sha256);
    for (const n_indent of INDENT_CASES) {
      const expected = fixture.indent.answers[n_indent]!;
      const { content, stop_type, has_new_line, truncated, tokens_predicted } = (await (await post({ ...INDENT_BODY, n_indent })).json()) as Answer;
      expect({ n_indent, content, stop_type, has_new_line, truncated, tokens_predicted }).toEqual({ n_indent, ...expected });
      const stream = await streamed({ ...INDENT_BODY, n_indent });
      expect({ n_indent, content: stream.content, stop_type: stream.last.stop_type }).toEqual({
        n_indent,
        content: expected.content,
        stop_type: expected.stop_type,
      });
    }
    // Each n_indent ends the completion at a line of its own (llama-server's cut: before the line's first character).
    expect(new Set(INDENT_CASES.map((n) => fixture.indent.answers[n]!.content)).size).toBe(INDENT_CASES.length);
  });

  test("samplers: each chain draws llama-server's completion seed for seed, the infill sampler's end included", async () => {
    for (const [name, samplers] of Object.entries(CHAIN_CASES)) {
      const drawn = [];
      for (const seed of CHAIN_SEEDS) drawn.push(((await (await post({ ...CHAIN_BODY, samplers, seed })).json()) as Answer).content);
      expect({ name, drawn }).toEqual({ name, drawn: fixture.chains[name]! });
    }
    // The infill sampler ends the completion where the model's end is likely; without it the draw goes on.
    expect(fixture.chains["llama.vscode"]).not.toEqual(fixture.chains["no infill"]);
  });

  test("t_max_predict_ms: once past, the completion ends with the next piece that breaks a line", async () => {
    const request = { ...INDENT_BODY, n_predict: 400 };
    const unlimited = ((await (await post(request)).json()) as Answer).content;
    const plain = (await (await post({ ...request, t_max_predict_ms: 1 })).json()) as Answer;
    const stream = await streamed({ ...request, t_max_predict_ms: 1 });
    for (const { content, stop_type, tokens_predicted } of [plain, { ...stream.last, content: stream.content }]) {
      expect(stop_type).toBe("limit");
      expect(tokens_predicted).toBeLessThan(400);
      expect(content).toEndWith("\n");
      expect(unlimited.startsWith(content)).toBe(true);
    }
  });
});

describe("suffix and raw", () => {
  const plain = () => INFILL_CASES[0]!.body;
  let openai: OpenAI;
  let ollama: Ollama;
  let lastHeaders = new Headers();
  beforeAll(() => {
    openai = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });
    const recording: typeof fetch = Object.assign(async (...args: Parameters<typeof fetch>) => {
      const response = await fetch(...args);
      lastHeaders = response.headers;
      return response;
    }, fetch);
    ollama = new Ollama({ host: server.url, headers: bearer(key), fetch: recording });
  });

  test("/v1/completions with a suffix fills in as /infill with the prompt before the cursor, plain and streamed", async () => {
    const expected = fixture.answers[INFILL_CASES[0]!.name]!;
    const request = { model: MODEL, prompt: plain().input_prefix, suffix: plain().input_suffix, max_tokens: INFILL_PREDICT, temperature: 0 };
    const completion = await openai.completions.create(request);
    expect(completion.choices[0]!.text).toBe(expected.content);
    expect(completion.usage!.prompt_tokens).toBe(expected.tokens.length);
    expect(lastPrompt()).toBe(expected.prompt);
    let text = "";
    for await (const chunk of await openai.completions.create({ ...request, stream: true })) text += chunk.choices[0]?.text ?? "";
    expect(text).toBe(expected.streamed);
  });

  test("/api/generate with a suffix, through the ollama client: the same prompt, plain and streamed; its system message ignored and said", async () => {
    const expected = fixture.answers[INFILL_CASES[0]!.name]!;
    const request = { model: MODEL, prompt: plain().input_prefix, suffix: plain().input_suffix, options: { temperature: 0, num_predict: INFILL_PREDICT } };
    const reply = await ollama.generate({ ...request, system: "You write Python.", stream: false });
    expect(reply.response).toBe(expected.content);
    expect(reply.prompt_eval_count).toBe(expected.tokens.length);
    expect(lastPrompt()).toBe(expected.prompt);
    expect(lastHeaders.get("x-parley-ignored-fields")).toBe("system");
    let text = "";
    for await (const part of await ollama.generate({ ...request, stream: true })) text += part.response;
    expect(text).toBe(expected.streamed);
    // /api/show says the model inserts, as Ollama's does for a model whose template has a suffix.
    expect((await ollama.show({ model: MODEL })).capabilities).toContain("insert");
  });

  test("raw: the prompt as written, as /v1/completions takes it; a suffix beside it ignored and said, as Ollama's server does", async () => {
    const prompt = fixture.answers[INFILL_CASES[0]!.name]!.prompt;
    const raw = await ollama.generate({
      model: MODEL,
      prompt,
      raw: true,
      suffix: "ignored",
      stream: false,
      options: { temperature: 0, num_predict: INFILL_PREDICT },
    });
    expect(lastHeaders.get("x-parley-ignored-fields")).toBe("suffix");
    const legacy = await openai.completions.create({ model: MODEL, prompt, max_tokens: INFILL_PREDICT, temperature: 0 });
    expect(raw.response).toBe(legacy.choices[0]!.text);
    expect(raw.prompt_eval_count).toBe(legacy.usage!.prompt_tokens);
    // Special tokens' texts in a raw prompt are those tokens: the same prompt as the infill's.
    expect(raw.prompt_eval_count).toBe(fixture.answers[INFILL_CASES[0]!.name]!.tokens.length);
    const refused = (await rejection(ollama.generate({ model: MODEL, prompt, raw: true, system: "x", stream: false }))) as {
      status_code: number;
      error: string;
    };
    expect(refused.status_code).toBe(400);
    expect(refused.error).toStartWith("system:");
  });
});

describe("a model without FIM tokens", () => {
  const demo = servedEngine("infill-demo");

  test("refuses to fill in, naming the field that asks for it on each route", async () => {
    const post = (path: string, body: object) =>
      fetch(`${demo.served.url}${path}`, { method: "POST", headers: { ...bearer(demo.key), "content-type": "application/json" }, body: JSON.stringify(body) });
    const infilled = await post("/infill", { input_prefix: "a", input_suffix: "b" });
    expect(infilled.status).toBe(400);
    const error = ((await infilled.json()) as { error: { param: string; message: string } }).error;
    expect(error.param).toBe("input_suffix");
    expect(error.message).toContain("fill in the middle");
    const legacy = await post("/v1/completions", { prompt: "a", suffix: "b" });
    expect(legacy.status).toBe(400);
    expect(((await legacy.json()) as { error: { param: string } }).error.param).toBe("suffix");
    const generated = await post("/api/generate", { model: "parley", prompt: "a", suffix: "b", stream: false });
    expect(generated.status).toBe(400);
    expect(((await generated.json()) as { error: string }).error).toStartWith("suffix: ");
  });
});
