/**
 * Ordinary requests that once ended in a 500, each sent through the public API as a client sends
 * it: histories longer than the context ending with any role, schemas no grammar can be built
 * from, a tool list of hundreds of kilobytes, two keys in one request, and the resumed stream of a
 * background response whose server died. Each is answered with a 4xx naming its field, or served
 * where fitting is the documented behaviour, and no request logs an error line.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { ABANDONED } from "../../src/db/types";
import type { Engine } from "../../src/llm/engine";
import { SCHEMA_LIMITS } from "../../src/llm/json-schema";
import { allowSlowTests, bearer, isErrorLine, readSse, type Served, serveApp, testDb, testEngine, until } from "../support";

allowSlowTests();

const db = testDb("hardening");
const alice = await db.keys.create("alice", "user");
const bob = await db.keys.create("bob", "user");
const logLines: string[] = [];
let engine: Engine;
let served: Served;

beforeAll(async () => {
  engine = await testEngine({ contextSize: 2048 });
  served = serveApp({ storage: db.storage, engine, logLines, limits: { bodyLimitBytes: 4 << 20, pictureBodyLimitBytes: 4 << 20 } });
});
afterAll(async () => {
  await served.stop();
  await engine.close();
  await db.storage.close();
});
afterEach(() => {
  const errors = logLines.filter(isErrorLine);
  logLines.length = 0;
  expect(errors).toEqual([]);
});

interface Answer {
  status: number;
  body: { error?: { param?: string | null; message: string; type?: string }; type?: string } & Record<string, unknown>;
}

async function post(path: string, body: unknown, headers: Record<string, string> = bearer(alice.key)): Promise<Answer> {
  const response = await fetch(`${served.url}${path}`, {
    method: "POST",
    headers: { ...headers, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as Answer["body"] };
}

/** Where each protocol says which field is wrong: OpenAI's `param`, else the message. */
const named = (answer: Answer) => `${answer.body.error?.param ?? ""} ${answer.body.error?.message ?? ""}`;

const alternating = (count: number, last: "user" | "assistant") =>
  Array.from({ length: count }, (_, i) => ({ role: (count - 1 - i) % 2 === 0 ? last : last === "user" ? "assistant" : "user", content: `word${i % 7}` }));

describe("a history longer than the context", () => {
  const LONG_REPLY = "word ".repeat(5000);
  const histories: [string, { role: string; content: string }[]][] = [
    ["1,200 alternating one-word messages ending with the assistant", alternating(1200, "assistant")],
    ["1,201 ending with the user", alternating(1201, "user")],
    [
      "a question and a reply far longer than the context",
      [
        { role: "user", content: "hi" },
        { role: "assistant", content: LONG_REPLY },
      ],
    ],
    [
      "a reply far longer than the context, then a question",
      [
        { role: "assistant", content: LONG_REPLY },
        { role: "user", content: "and?" },
      ],
    ],
    ["a system prompt far longer than the context, alone", [{ role: "system", content: LONG_REPLY }]],
    [
      "a question, then a system message far longer than the context",
      [
        { role: "user", content: "hi" },
        { role: "system", content: LONG_REPLY },
      ],
    ],
  ];

  for (const [label, messages] of histories) {
    test(`chat completions: ${label} is answered from its newest part`, async () => {
      const answer = await post("/v1/chat/completions", { model: "any", messages, max_tokens: 4, temperature: 0 });
      expect(answer.status, JSON.stringify(answer.body)).toBe(200);
      const usage = answer.body.usage as { prompt_tokens: number };
      expect(usage.prompt_tokens).toBeLessThanOrEqual(engine.contextSize);
    });
  }

  test("responses: a reply far longer than the context as the last input item", async () => {
    const answer = await post("/v1/responses", {
      model: "any",
      input: [
        { role: "user", content: "hi" },
        { role: "assistant", content: LONG_REPLY },
      ],
      max_output_tokens: 4,
      store: false,
    });
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
  });

  test("a tool's result far longer than the context, last", async () => {
    const messages = [
      { role: "user", content: "weather?" },
      { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "weather", arguments: "{}" } }] },
      { role: "tool", tool_call_id: "c1", content: LONG_REPLY },
    ];
    const tools = [{ type: "function", function: { name: "weather", parameters: { type: "object", properties: {} } } }];
    const answer = await post("/v1/chat/completions", { model: "any", messages, tools, max_tokens: 4 });
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
  });

  test("messages: a long conversation whose last reply outgrows the context, then a question", async () => {
    const messages = [...alternating(1200, "assistant"), { role: "user", content: "and?" }];
    const answer = await post("/v1/messages", { model: "any", max_tokens: 4, messages }, { "x-api-key": alice.key });
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
  });
});

/** Schemas that once failed inside the grammar's construction, each with the keyword a refusal must name. */
const nested = (depth: number, leaf: object = { type: "string" }): object =>
  depth === 0 ? leaf : { type: "object", properties: { a: nested(depth - 1, leaf) }, required: ["a"] };
const UNBUILDABLE: [string, Record<string, unknown>, string][] = [
  ["minItems 1e5", { type: "object", properties: { a: { type: "array", items: { type: "integer" }, minItems: 1e5 } } }, "minItems"],
  ["minItems 1e9", { type: "object", properties: { a: { type: "array", items: { type: "integer" }, minItems: 1e9 } } }, "minItems"],
  ["minLength 1e6", { type: "object", properties: { a: { type: "string", minLength: 1e6 } } }, "minLength"],
  ["minLength = maxLength = 1e9", { type: "object", properties: { a: { type: "string", minLength: 1e9, maxLength: 1e9 } } }, "minLength"],
  ["maxLength 1e9", { type: "object", properties: { a: { type: "string", maxLength: 1e9 } } }, "maxLength"],
  ["minProperties 1e6", { type: "object", additionalProperties: { type: "integer" }, minProperties: 1e6 }, "minProperties"],
  ["a $ref to itself", { type: "object", properties: { a: { $ref: "#/$defs/self" } }, $defs: { self: { $ref: "#/$defs/self" } } }, "$ref"],
  ["a mutual $ref loop", { type: "object", properties: { a: { $ref: "#/$defs/x" } }, $defs: { x: { $ref: "#/$defs/y" }, y: { $ref: "#/$defs/x" } } }, "$ref"],
  [
    "a recursive object",
    { type: "object", properties: { a: { $ref: "#/$defs/node" } }, $defs: { node: { type: "object", properties: { next: { $ref: "#/$defs/node" } } } } },
    "$ref",
  ],
  ["nesting 500 deep", nested(500) as Record<string, unknown>, "depth"],
  ["nesting 1,000 deep", nested(1000) as Record<string, unknown>, "depth"],
  ["maxLength below minLength", { type: "object", properties: { a: { type: "string", minLength: 4, maxLength: 2 } } }, "maxLength"],
  [
    "maxItems below prefixItems",
    { type: "object", properties: { a: { type: "array", prefixItems: [{ type: "integer" }, { type: "integer" }], maxItems: 1 } } },
    "prefixItems",
  ],
  ["maxProperties below its properties", { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, maxProperties: 1 }, "properties"],
  [
    "arrays nested 1,000 deep",
    { type: "object", properties: { a: JSON.parse(`${'{"type":"array","items":'.repeat(1000)}{"type":"integer"}${"}".repeat(1000)}`) } },
    "depth",
  ],
];

/** A repetition past the limit is a bound the grammar cannot hold: refused when strict, advisory (left out) otherwise. */
const ADVISORY = new Set(["minItems 1e5", "minItems 1e9", "minLength 1e6", "minLength = maxLength = 1e9", "maxLength 1e9", "minProperties 1e6"]);

describe("schemas a grammar cannot be built from are refused naming the keyword and its place", () => {
  /** Every protocol's ways of holding a reply to a schema, strict or not. */
  const asks = (schema: object, strict: boolean): [string, string, object, Record<string, string>?][] => [
    [
      "response_format",
      "/v1/chat/completions",
      { messages: [{ role: "user", content: "hi" }], max_tokens: 4, response_format: { type: "json_schema", json_schema: { name: "x", strict, schema } } },
    ],
    ["text.format", "/v1/responses", { input: "hi", store: false, max_output_tokens: 4, text: { format: { type: "json_schema", name: "x", strict, schema } } }],
    [
      "tools[0].function.parameters",
      "/v1/chat/completions",
      { messages: [{ role: "user", content: "hi" }], max_tokens: 4, tools: [{ type: "function", function: { name: "f", strict, parameters: schema } }] },
    ],
    [
      "tools[0].input_schema",
      "/v1/messages",
      { max_tokens: 4, messages: [{ role: "user", content: "hi" }], tools: [{ name: "f", strict, input_schema: schema }] },
      { "x-api-key": alice.key },
    ],
    [
      "response_format",
      "/api/v1.0/chat",
      { message: "hi", conversation_id: "schema", max_tokens: 4, response_format: { type: "json_schema", json_schema: { name: "x", strict, schema } } },
    ],
  ];

  for (const [label, schema, keyword] of UNBUILDABLE) {
    test(label, async () => {
      for (const strict of [true, false]) {
        for (const [field, path, body, headers] of asks(schema, strict)) {
          const answer = await post(path, { model: "any", ...body }, headers);
          if (!strict && ADVISORY.has(label)) {
            expect(answer.status, `${path} ${JSON.stringify(answer.body)}`).toBe(200);
            continue;
          }
          // The native API's contract answers a request it cannot take with 422; the others' with 400.
          expect(answer.status, `${path} ${JSON.stringify(answer.body)}`).toBe(path.startsWith("/api/") ? 422 : 400);
          expect(named(answer), path).toContain(field);
          expect(named(answer), path).toContain(keyword);
        }
      }
    });
  }

  test("a schema as deep as the limits allow, with repetitions at their limit, is held", async () => {
    const repeated = { type: "array", items: { type: "integer" }, maxItems: SCHEMA_LIMITS.repetition };
    const wide = { type: "object", properties: Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`k${i}`, repeated])) };
    const answer = await post("/v1/chat/completions", {
      model: "any",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 8,
      response_format: { type: "json_schema", json_schema: { name: "x", schema: nested(SCHEMA_LIMITS.depth - 3, wide) } },
    });
    expect(answer.status, JSON.stringify(answer.body)).toBe(200);
  });
});

describe("a large tool list", () => {
  const tools = Array.from({ length: 128 }, (_, i) => ({
    type: "function",
    function: {
      name: `tool_${i}`,
      description: `Tool number ${i}`,
      parameters: {
        type: "object",
        properties: Object.fromEntries(
          Array.from({ length: 20 }, (_, p) => [`p${p}`, { type: "string", enum: Array.from({ length: 50 }, (_, v) => `value_${i}_${p}_${v}`) }]),
        ),
      },
    },
  }));

  test("of 800 KB is answered or refused naming tools, never a 500, while another user is served", async () => {
    const body = { model: "any", messages: [{ role: "user", content: "hi" }], tools, max_tokens: 2 };
    expect(JSON.stringify(body).length).toBeGreaterThan(500_000);
    const big = post("/v1/chat/completions", body);
    const cheap = await post("/v1/chat/completions", { model: "any", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }, bearer(bob.key));
    expect(cheap.status).toBe(200);
    const answer = await big;
    expect([200, 400], JSON.stringify(answer.body).slice(0, 300)).toContain(answer.status);
    if (answer.status === 400) expect(named(answer)).toContain("tools");
  });
});

describe("tools that alone outgrow the context (found by the protocol fuzz test)", () => {
  const tools = [{ type: "function", name: "g", description: "word ".repeat(3000) }];

  test("beside an input of a reasoning item alone: 400 naming tools, plain and streamed", async () => {
    for (const stream of [false, true]) {
      const answer = await post("/v1/responses", { model: "any", input: [{ type: "reasoning", summary: [] }], store: false, stream, tools });
      expect(answer.status).toBe(400);
      expect(answer.body.error?.param).toBe("tools");
    }
  });

  test("in a background response: refused before it starts, not kept as a server failure", async () => {
    const before = await db.storage.responses.count();
    const answer = await post("/v1/responses", { model: "any", input: "hi", store: true, background: true, max_output_tokens: 1, tools });
    expect(answer.status).toBe(400);
    expect(answer.body.error?.param).toBe("tools");
    expect(await db.storage.responses.count()).toBe(before);
  });
});

describe("two keys in one request", () => {
  test("x-api-key and Authorization naming different keys are refused naming both headers; the same key twice is served", async () => {
    const body = { model: "any", max_tokens: 2, messages: [{ role: "user", content: "hi" }] };
    const conflicting = await post("/v1/messages", body, { "x-api-key": alice.key, ...bearer(bob.key) });
    expect(conflicting.status).toBe(401);
    expect(named(conflicting)).toContain("x-api-key");
    expect(named(conflicting)).toContain("Authorization");
    expect((await post("/v1/messages", body, { "x-api-key": alice.key, ...bearer(alice.key) })).status).toBe(200);
  });
});

describe("the resumed stream of a background response whose server died", () => {
  test("ends with the response's terminal event, from the start or after any event", async () => {
    const id = "resp_diedmidway0000000000000000000000000000";
    await db.storage.responses.create(
      {
        id,
        userId: alice.userId,
        previousResponseId: null,
        chainKey: id,
        conversationId: null,
        model: engine.modelName,
        createdAt: Date.now(),
        params: {},
        input: [],
        background: true,
      },
      1,
    );
    const kept = ["response.created", "response.in_progress", "response.output_item.added"].map((type, seq) => ({
      seq,
      type,
      text: `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq })}\n\n`,
    }));
    await db.storage.responses.appendEvents(id, kept);
    // A lease of 1 ms that nothing renews: the response reads as its server's death left it.
    await until(async () => (await db.storage.responses.get(alice.userId, id))?.status === "failed", "the lease to run out");
    for (const after of ["", "&starting_after=2", "&starting_after=0"]) {
      const response = await fetch(`${served.url}/v1/responses/${id}?stream=true${after}`, { headers: bearer(alice.key), signal: AbortSignal.timeout(3_000) });
      expect(response.status).toBe(200);
      const events = await Array.fromAsync(readSse(response));
      const last = events.filter((event) => event.event !== "comment").at(-1)!;
      expect(last.event).toBe("response.failed");
      const data = last.data as { sequence_number: number; response: { status: string; error: { message: string } } };
      expect(data.sequence_number).toBe(kept.length);
      expect(data.response).toMatchObject({ status: "failed", error: { message: ABANDONED } });
    }
  });
});
