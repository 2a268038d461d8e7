/**
 * Structured output: `response_format` holds a reply to JSON, or to a JSON Schema, token by token
 * (a grammar), on both APIs; a schema keyword the grammar cannot enforce is refused. The demo
 * model ends such replies by itself. Through the official `openai` SDK's parse helpers, the AI
 * SDK's `generateObject`, the native API, and seeded random schemas validated by ajv.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";
import { generateObject } from "ai";
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";
import { allowSlowTests, bearer, type Random, rejection, servedEngine, withSeed } from "../support";

allowSlowTests();

const app = servedEngine("structured-output", { parallel: 2 });
let client: OpenAI;

beforeAll(() => {
  client = new OpenAI({ apiKey: app.key, baseURL: `${app.served.url}/v1`, maxRetries: 0 });
});

const ask = [{ role: "user" as const, content: "Describe a person as JSON" }];

const Person = z.object({
  name: z.string(),
  age: z.number().int(),
  role: z.enum(["teacher", "student", "friend"]),
  address: z.object({ city: z.string(), zip: z.string().nullable() }),
  tags: z.array(z.string()),
});

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

describe("the openai SDK", () => {
  test("chat.completions.parse with zodResponseFormat: a parsed object that validates, greedy and sampled", async () => {
    for (const [temperature, seed] of [
      [0, 1],
      [1, 2],
      [1, 3],
    ] as const) {
      const completion = await client.chat.completions.parse({
        model: "any",
        messages: ask,
        temperature,
        seed,
        response_format: zodResponseFormat(Person, "person"),
      });
      const { message, finish_reason } = completion.choices[0]!;
      expect(finish_reason).toBe("stop");
      expect(Person.parse(message.parsed)).toEqual(message.parsed!);
      // The JSON alone: no text or whitespace after it.
      expect(message.content!.trimEnd()).toBe(message.content!);
    }
  });

  test("streamed: the deltas assemble to a JSON object that validates", async () => {
    const stream = client.chat.completions.stream({
      model: "any",
      messages: ask,
      temperature: 1,
      seed: 5,
      response_format: zodResponseFormat(Person, "person"),
    });
    const final = await stream.finalChatCompletion();
    expect(Person.parse(final.choices[0]!.message.parsed)).toBeDefined();
  });

  test("json_object: one JSON object", async () => {
    for (const seed of [1, 2, 3, 4]) {
      const completion = await client.chat.completions.create({ model: "any", messages: ask, temperature: 1, seed, response_format: { type: "json_object" } });
      const parsed: unknown = JSON.parse(completion.choices[0]!.message.content!);
      expect(typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)).toBe(true);
    }
  });

  test("a reply cut by max_tokens is finish_reason length, its JSON incomplete", async () => {
    const completion = await client.chat.completions.create({
      model: "any",
      messages: ask,
      temperature: 0,
      max_tokens: 3,
      response_format: zodResponseFormat(Person, "person"),
    });
    expect(completion.choices[0]!.finish_reason).toBe("length");
    expect(() => JSON.parse(completion.choices[0]!.message.content!)).toThrow();
  });

  /** Keywords the grammar cannot hold, each with the schema's structure that it still holds without them. */
  const UNENFORCED: [string, Record<string, unknown>, Record<string, unknown>][] = [
    [
      // Unanchored: "contains", which no grammar of the string alone holds.
      "pattern",
      { type: "object", properties: { code: { type: "string", pattern: "[A-Z]+" } } },
      { type: "object", properties: { code: { type: "string" } } },
    ],
    ["minimum", { type: "object", properties: { n: { type: "integer", minimum: 3 } } }, { type: "object", properties: { n: { type: "integer" } } }],
    [
      "oneOf",
      { type: "object", properties: { n: { oneOf: [{ type: "integer" }, { type: "string" }] } } },
      { type: "object", properties: { n: { anyOf: [{ type: "integer" }, { type: "string" }] } } },
    ],
    ["format", { type: "object", properties: { host: { type: "string", format: "hostname" } } }, { type: "object", properties: { host: { type: "string" } } }],
    ["uniqueItems", { type: "array", items: { type: "string" }, uniqueItems: true }, { type: "array", items: { type: "string" } }],
  ];

  test.each(UNENFORCED)("strict, a schema with %s is a BadRequestError naming response_format and the keyword", async (keyword, schema) => {
    const refusal = await rejection(
      client.chat.completions.create({
        model: "any",
        messages: ask,
        response_format: { type: "json_schema", json_schema: { name: "x", strict: true, schema } },
      }),
    );
    expect(refusal).toBeInstanceOf(OpenAI.BadRequestError);
    expect((refusal as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("response_format");
    expect((refusal as Error).message).toContain(keyword);
  });

  test.each(UNENFORCED)("not strict, a schema with %s is held to the rest: the keyword is advisory", async (_, schema, structure) => {
    const validate = ajv.compile(structure);
    for (const seed of [1, 2, 3]) {
      const completion = await client.chat.completions.create({
        model: "any",
        messages: ask,
        temperature: 1,
        seed,
        max_tokens: 200,
        response_format: { type: "json_schema", json_schema: { name: "x", schema } },
      });
      const { message, finish_reason } = completion.choices[0]!;
      // A reply cut by max_tokens is incomplete JSON by design; a finished one holds the structure.
      if (finish_reason === "stop") expect(validate(JSON.parse(message.content!)), `seed ${seed}: ${message.content}`).toBe(true);
    }
  });

  test(
    "uuid, email and anchored regular patterns, which Parley writes itself, hold strictly: every finished reply is valid under ajv",
    withSeed(async (random) => {
      const schema = {
        type: "object",
        properties: {
          id: { type: "string", format: "uuid" },
          mail: { type: "string", format: "email" },
          ids: { type: "array", items: { type: "string", format: "uuid" }, maxItems: 2 },
          code: { type: "string", pattern: "^[A-Z]{3}-\\d{2,4}$" },
          pet: { type: "string", pattern: "^(?:cat|dog)s?$" },
          host: { type: "string", pattern: "^[a-z]{1,8}(\\.[a-z]{1,8}){0,2}$" },
        },
        required: ["id", "mail", "ids", "code", "pet", "host"],
        additionalProperties: false,
      };
      const validate = ajv.compile(schema);
      let finished = 0;
      for (let i = 0; i < 6; i++) {
        const seed = random.int(0, 2 ** 31);
        const completion = await client.chat.completions.create({
          model: "any",
          messages: ask,
          temperature: 1,
          seed,
          max_tokens: 300,
          response_format: { type: "json_schema", json_schema: { name: "x", strict: true, schema } },
        });
        const { message, finish_reason } = completion.choices[0]!;
        if (finish_reason !== "stop") continue;
        finished++;
        expect(validate(JSON.parse(message.content!)), `seed ${seed}: ${message.content} ${JSON.stringify(validate.errors)}`).toBe(true);
      }
      expect(finished).toBeGreaterThan(0);
    }),
  );

  test("a $ref outside $defs is refused, strict or not: no grammar can follow it", async () => {
    for (const strict of [true, false]) {
      const refusal = await rejection(
        client.chat.completions.create({
          model: "any",
          messages: ask,
          response_format: {
            type: "json_schema",
            json_schema: { name: "x", strict, schema: { type: "object", properties: { n: { $ref: "#/definitions/n" } } } },
          },
        }),
      );
      expect(refusal).toBeInstanceOf(OpenAI.BadRequestError);
      expect((refusal as Error).message).toContain("$ref");
    }
  });
});

test("the AI SDK's generateObject with a zod schema", async () => {
  const parley = createOpenAICompatible({ name: "parley", baseURL: `${app.served.url}/v1`, apiKey: app.key, supportsStructuredOutputs: true });
  const { object } = await generateObject({ model: parley("any"), schema: Person, prompt: "Describe a person", temperature: 0 });
  expect(Person.parse(object)).toEqual(object);
});

test("LangChain's ChatOpenAI.withStructuredOutput: each of its three methods returns a valid object", async () => {
  const model = new ChatOpenAI({ model: "any", temperature: 0, apiKey: app.key, configuration: { baseURL: `${app.served.url}/v1` }, maxRetries: 0 });
  // jsonSchema sends the schema: the reply is held to it.
  expect(Person.parse(await model.withStructuredOutput(Person, { method: "jsonSchema" }).invoke("Describe a person as JSON"))).toBeDefined();
  // functionCalling offers the schema as a tool and names it in tool_choice: the forced call is held to it.
  expect(Person.parse(await model.withStructuredOutput(Person, { method: "functionCalling" }).invoke("Describe a person"))).toBeDefined();
  // jsonMode sends no schema (a model is told the shape in its prompt, which the demo cannot read): any object.
  const anyObject = z.record(z.string(), z.unknown());
  expect(anyObject.parse(await model.withStructuredOutput(anyObject, { method: "jsonMode" }).invoke("Describe a person as JSON"))).toBeDefined();
});

test("the native API: response_format holds the stored reply to the schema; a bad schema is refused before anything is stored", async () => {
  const schema = z.toJSONSchema(Person);
  const chat = (body: object) =>
    fetch(`${app.served.url}/api/v1.0/chat`, {
      method: "POST",
      headers: { ...bearer(app.key), "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  const response = await chat({
    message: "Describe a person",
    conversation_id: "structured-1",
    temperature: 0,
    response_format: { type: "json_schema", json_schema: { name: "person", schema } },
  });
  expect(response.status).toBe(200);
  const { message } = (await response.json()) as { message: { content: string } };
  expect(Person.parse(JSON.parse(message.content))).toBeDefined();
  const stored = (await (
    await fetch(`${app.served.url}/api/v1.0/chat/messages?conversation_id=structured-1&sort_by=id:desc`, { headers: bearer(app.key) })
  ).json()) as { data: { content: string }[] };
  expect(stored.data[0]!.content).toBe(message.content);

  const refused = await chat({
    message: "Hi",
    conversation_id: "structured-2",
    response_format: { type: "json_schema", json_schema: { name: "x", strict: true, schema: { type: "string", pattern: "a" } } },
  });
  expect(refused.status).toBe(422);
  expect(((await refused.json()) as { error: { param: string } }).error.param).toBe("response_format");
  const none = (await (await fetch(`${app.served.url}/api/v1.0/chat/messages?conversation_id=structured-2`, { headers: bearer(app.key) })).json()) as {
    data: unknown[];
  };
  expect(none.data).toEqual([]);
});

/** A random schema of the enforced subset, `depth` levels of objects and arrays at most. */
function randomSchema(random: Random, depth: number): Record<string, unknown> {
  const leaves = [
    () => ({ type: "string" }),
    () => ({ type: "string", maxLength: random.int(1, 12) }),
    () => ({ type: "integer" }),
    () => ({ type: "number" }),
    () => ({ type: "boolean" }),
    () => ({ type: ["string", "null"] }),
    () => ({ enum: ["red", "green", 3, null] }),
    () => ({ const: "fixed" }),
    () => ({ type: "string", format: random.pick(["date", "time", "date-time"]) }),
  ];
  const nodes = [
    () => {
      const names = Array.from({ length: random.int(1, 4) }, (_, i) => `p${i}`);
      const required = names.filter(() => random.int(0, 3) > 0);
      return {
        type: "object",
        properties: Object.fromEntries(names.map((name) => [name, randomSchema(random, depth - 1)])),
        required,
        additionalProperties: false,
      };
    },
    () => ({ type: "array", items: randomSchema(random, depth - 1), minItems: random.int(0, 1), maxItems: random.int(2, 4) }),
    () => ({ anyOf: [randomSchema(random, depth - 1), randomSchema(random, depth - 1)] }),
  ];
  return depth > 0 && random.int(0, 2) > 0 ? random.pick(nodes)() : random.pick(leaves)();
}

test(
  "seeded random schemas of the enforced subset, seeds and temperatures up to 2: every reply validates, or is finish_reason length",
  withSeed(async (random) => {
    for (let trial = 0; trial < 16; trial++) {
      const properties = { a: randomSchema(random, 2), b: randomSchema(random, 2) };
      const schema = { type: "object", properties, required: ["a", "b"], additionalProperties: false };
      const temperature = random.pick([0, 0.7, 1, 1.5, 2]);
      const completion = await client.chat.completions.create({
        model: "any",
        messages: ask,
        temperature,
        seed: random.int(0, 2 ** 31),
        max_tokens: 400,
        response_format: { type: "json_schema", json_schema: { name: "random", schema } },
      });
      const { message, finish_reason } = completion.choices[0]!;
      const outcome = { trial, schema, temperature, content: message.content };
      if (finish_reason === "length") continue;
      expect({ ...outcome, finish_reason }).toEqual({ ...outcome, finish_reason: "stop" });
      const validate = ajv.compile(schema);
      expect({ ...outcome, valid: validate(JSON.parse(message.content!)), errors: validate.errors }).toEqual({ ...outcome, valid: true, errors: null });
    }
  }),
);
