/**
 * Every generating and retrieval route of every protocol, given random and adversarial bodies (issue #47: make
 * the class of 500s impossible, not only the cases found so far). A case fails on a 5xx, on an
 * internal error inside a 200 (a stream's error event, a response kept as failed), on an answer
 * not whole within its deadline, or on any line the app logs at error level. Bodies are mostly
 * valid, with a share of garbage in every field, so that most reach the engine: histories longer
 * than its small context ending with any role, schemas at and past the grammar's limits, tool
 * lists and item lists of every shape. Replies are a few tokens long, so a case is quick.
 * The seed is printed; PARLEY_TEST_SEED replays a run, PARLEY_FUZZ_CASES sets the cases per route
 * (`bun run bench fuzz` runs the long version). Conversations and kept responses carry over from
 * case to case, as a client's do: a counterexample that passes alone is replayed by its seed.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { deflateRawSync, deflateSync } from "node:zlib";
import fc from "fast-check";
import { PICTURE_LIMITS } from "../../src/chat/pictures";
import { VISION_MODEL_NAME } from "../../src/gguf/presets";
import {
  allowSlowTests,
  bearer,
  compiledNatives,
  isErrorLine,
  presetModel,
  type Served,
  type ServedModelsApp,
  serveModels,
  sseEvents,
  testDb,
  testSeed,
  until,
} from "../support";
import { gif, ihdr, jpeg, pngChunk, pngOf } from "../support/png";
import { VISION_IMAGES, visionPair } from "../support/vision";

allowSlowTests();

/** Enough per route to meet the rarer failures, few enough for the file to take well under a minute on two cores. */
const CASES = Number(Bun.env.PARLEY_FUZZ_CASES ?? 250);
const DEADLINE_MS = 15_000;
/** Picture cases decode, so they are fewer. */
const PICTURE_CASES = Math.max(1, Math.round(CASES / 5));
/** What this process's resident memory may grow by over all the cases: the bound docs/operations.md states. */
const RSS_GROWTH_MB = 1_024;
/** With the compiled natives, pictures go to the vision preset (its projector beside it); without, to the demo, which refuses them. */
const natives = await compiledNatives();

const db = testDb("protocol-fuzz");
const alice = await db.keys.create("alice", "user");
const logLines: string[] = [];
let service: ServedModelsApp;
let served: Served;

/** Ids a request may name that exist: kept responses (a chain to continue) and conversations. */
const keptResponses: string[] = [];
const conversations = ["fz-a", "fz-b"];
/** What was sent and answered, printed at the end: each route's statuses tell how much got past validation. */
const statuses = new Map<string, Map<number, number>>();
let requests = 0;
let rssBefore = 0;

beforeAll(async () => {
  // The demo answers turns; the retrieval models, embeddings and reranking.
  const paths = [await presetModel("demo"), await presetModel("embed"), await presetModel("rerank")];
  if (natives !== undefined) paths.push((await visionPair()).model);
  // Clients' fixed model names reach the demo, as they would a service of it alone.
  const aliases = { demo: "parley-demo", "gpt-4o": "parley-demo", "claude-sonnet-4-5": "parley-demo" };
  service = await serveModels({
    storage: db.storage,
    paths,
    aliases,
    max: paths.length,
    keepAliveMs: -1,
    contextSize: 512,
    logLines,
    limits: { bodyLimitBytes: 1 << 20, pictureBodyLimitBytes: 1 << 20 },
  });
  served = service.served;
  const post = async (path: string, body: object) => {
    const response = await fetch(`${served.url}${path}`, {
      method: "POST",
      headers: { ...bearer(alice.key), "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return ((await response.json()) as { id: string }).id;
  };
  conversations.push(await post("/v1/conversations", { items: [{ role: "user", content: "hi" }] }));
  keptResponses.push(await post("/v1/responses", { input: "hi", max_output_tokens: 2 }));
  rssBefore = process.memoryUsage().rss;
});
afterAll(async () => {
  const byRoute = [...statuses].map(
    ([path, counts]) =>
      `  ${path}: ${[...counts]
        .sort(([a], [b]) => a - b)
        .map(([status, count]) => `${status}×${count}`)
        .join(" ")}`,
  );
  console.log(
    `protocol fuzz: seed ${testSeed} (PARLEY_TEST_SEED replays it), ${CASES} cases per route (${PICTURE_CASES} with pictures), ${requests} requests\n${byRoute.join("\n")}`,
  );
  await service.stop();
  await db.storage.close();
});

// ---- values every protocol shares ---------------------------------------------------------------

const garbage: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  fc.constantFrom(null, "", 0, -1, 1.5, 1e9, 2 ** 53, -1e308, "NaN", "true", [], {}),
  fc.string({ unit: "binary", maxLength: 12 }),
);
/** `valid`, and one time in `oneIn` `odd`: rarely enough that most requests pass validation, while each part is attacked. */
const usually = <T, U = unknown>(valid: fc.Arbitrary<T>, odd = garbage as fc.Arbitrary<U>, oneIn = 30): fc.Arbitrary<T | U> =>
  fc.oneof({ weight: oneIn - 1, arbitrary: valid }, { weight: 1, arbitrary: odd });
/** A field that is sent in `percent` of requests (`undefined`, which JSON leaves out, otherwise). */
const sometimes = (value: fc.Arbitrary<unknown>, percent = 33) =>
  fc.oneof({ weight: 100 - percent, arbitrary: fc.constant(undefined) }, { weight: percent, arbitrary: value });
/** A request's optional field: sometimes sent, now and then of the wrong type. */
const field = (value: fc.Arbitrary<unknown>, percent = 33) => sometimes(usually(value), percent);

const SPECIAL_TEXT = [
  "hi",
  "",
  " ",
  "\n",
  "\u0000",
  "\ud800",
  "a\udc00b",
  "💥",
  "e\u0301",
  "\ufeff",
  "<think>",
  "</think>",
  "<tool_call>",
  '<tool_call>{"name":"f","arguments":{}}</tool_call>',
  "[TOOL_CALLS] [{}]",
  "<|python_tag|>",
  "<|im_end|>",
  "<|im_start|>system",
  "<s>",
  "</s>",
  "{{ raise_exception('x') }}",
  "{% for %}",
];
/** Message text: special strings, random strings, and now and then one far longer than the 512-token context. */
const text = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom(...SPECIAL_TEXT) },
  { weight: 5, arbitrary: fc.string({ minLength: 1, maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ unit: "binary", minLength: 1, maxLength: 20 }) },
  { weight: 1, arbitrary: fc.integer({ min: 300, max: 4000 }).map((n) => "word ".repeat(n)) },
);
const replyLength = fc.integer({ min: 1, max: 4 });
const modelName = fc.constantFrom("parley", "demo", "gpt-4o", "claude-sonnet-4-5", "", "../../etc/passwd");
const unit = fc.double({ min: 0, max: 1, noNaN: true });
/** Few call ids, so that a result often answers an earlier call, and now and then one that none makes. */
const callId = usually(fc.constantFrom("c1", "c2", "call_x"), fc.constantFrom("", "c1 ", "unknown"), 10);
const callArguments = usually(
  fc.constantFrom("{}", '{"a":1}', '{"city":"Paris","days":2}'),
  fc.oneof(
    fc.constantFrom("[]", "", "null", "{", '{"a":'),
    fc.jsonValue({ maxDepth: 2 }).map((value) => JSON.stringify(value)),
  ),
  8,
);
/** Few names, so that a tool choice often names an offered tool; now and then an invalid one. */
const toolName = usually(
  fc.constantFrom("f", "get_weather", "a-b_c", "search", "t1"),
  fc.oneof(fc.constantFrom("bad name", "", "x".repeat(65), "ü"), fc.string({ maxLength: 70 })),
  30,
);

// ---- JSON schemas: at and past the grammar's limits (docs/API.md, Structured output) ------------

const bound = usually(fc.nat(4), fc.constantFrom(-1, 1.5, 999, 1000, 1001, 1e5, 1e9, 2 ** 53, 1e308, "NaN", "1", null), 12);
const extremeNumber = fc.constantFrom(-1, 0, 1.5, 1e9, 999999999999999, -999999999999999, 1e15, 1e308, -1e308, "NaN");
const DEFS = ["A", "B", "node"];
const ref = usually(
  fc.constantFrom(...DEFS.map((name) => `#/$defs/${name}`)),
  fc.constantFrom("#/$defs/missing", "#", "#/properties/a", "#/definitions/A", "other.json#/x", "#/$defs/A/properties/a", ""),
  6,
);
const propertyName = usually(fc.constantFrom("a", "b", "name", "city"), fc.constantFrom("__proto__", "constructor", "", "x y", "ü"), 8);
const unknownKeyword = fc.constantFrom(
  "pattern",
  "minimum",
  "maximum",
  "multipleOf",
  "oneOf",
  "allOf",
  "not",
  "uniqueItems",
  "if",
  "contains",
  "patternProperties",
  "$id",
  "x-custom",
  "title",
  "default",
  "examples",
  "$schema",
);
const asObject = (value: unknown): Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : { value };
const primitive = fc.oneof(fc.string({ maxLength: 8 }), fc.integer(), fc.boolean(), fc.constant(null));

const { schema } = fc.letrec<{ schema: unknown }>((tie) => ({
  schema: fc.oneof(
    { depthSize: "small", maxDepth: 5 },
    { weight: 3, arbitrary: fc.record({ type: fc.constant("string"), minLength: bound, maxLength: bound }, { requiredKeys: ["type"] }) },
    {
      weight: 1,
      arbitrary: fc.record({
        type: fc.constant("string"),
        format: usually(fc.constantFrom("date", "time", "date-time"), fc.constant("email"), 6),
        maxLength: sometimes(bound, 5),
      }),
    },
    {
      weight: 4,
      arbitrary: fc.record({
        type: usually(
          fc.constantFrom<unknown>("integer", "number", "boolean", "null", ["string", "null"], ["integer", "boolean"]),
          fc.constantFrom<unknown>("date", [], "any"),
          12,
        ),
      }),
    },
    { weight: 1, arbitrary: fc.record({ type: fc.constant("integer"), minimum: extremeNumber, maximum: extremeNumber }, { requiredKeys: ["type"] }) },
    {
      weight: 2,
      arbitrary: fc.oneof(
        fc.record({ enum: usually(fc.array(primitive, { minLength: 1, maxLength: 5 }), fc.array(fc.jsonValue({ maxDepth: 1 }), { maxLength: 3 }), 6) }),
        fc.record({ const: primitive }),
        fc.constantFrom<unknown>(true, false, {}),
      ),
    },
    {
      weight: 4,
      arbitrary: fc.record(
        {
          type: fc.constant("object"),
          properties: fc.dictionary(propertyName, tie("schema"), { maxKeys: 4 }),
          required: fc.array(propertyName, { maxLength: 3 }),
          additionalProperties: fc.oneof(fc.boolean(), tie("schema")),
          minProperties: bound,
          maxProperties: bound,
        },
        { requiredKeys: ["type"] },
      ),
    },
    {
      weight: 4,
      arbitrary: fc.record(
        { type: fc.constant("array"), items: tie("schema"), prefixItems: fc.array(tie("schema"), { maxLength: 3 }), minItems: bound, maxItems: bound },
        { requiredKeys: ["type"] },
      ),
    },
    { weight: 2, arbitrary: fc.record({ anyOf: fc.array(tie("schema"), { minLength: 1, maxLength: 4 }) }) },
    { weight: 2, arbitrary: ref.map(($ref) => ({ $ref })) },
    { weight: 1, arbitrary: fc.tuple(tie("schema"), unknownKeyword, garbage).map(([inner, keyword, value]) => ({ ...asObject(inner), [keyword]: value })) },
  ),
}));
/** Nesting around the limit of 32, through objects or arrays. */
const deepSchema = fc.tuple(schema, fc.integer({ min: 25, max: 45 }), fc.boolean()).map(([leaf, depth, arrays]) => {
  let nested = leaf;
  for (let i = 0; i < depth; i++) nested = arrays ? { type: "array", items: nested } : { type: "object", properties: { a: nested }, required: ["a"] };
  return nested;
});
/** What a client would ask for: held to by the grammar, so that a share of cases generate under one. */
const WEATHER = {
  type: "object",
  properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer" }, unit: { enum: ["c", "f"] } },
  required: ["city", "days"],
  additionalProperties: false,
};
/** A request's schema: mostly an object's, with the `$defs` its `$ref`s lead into (cycles among them included). */
const rootSchema = fc.oneof(
  {
    weight: 10,
    arbitrary: fc
      .tuple(
        usually(
          schema.map((root) => ({ type: "object", properties: { a: root }, required: ["a"] })),
          fc.oneof(schema, deepSchema),
          4,
        ),
        sometimes(fc.record({ A: schema, B: schema, node: schema }, { requiredKeys: [] }), 60),
      )
      .map(([root, $defs]) => ({ ...asObject(root), ...($defs ? { $defs } : {}) })),
  },
  { weight: 5, arbitrary: fc.constant(WEATHER) },
  { weight: 1, arbitrary: garbage },
);
const schemaName = usually(fc.constantFrom("x", "person_1", "a-b"), fc.string({ maxLength: 70 }), 20);
const responseFormat = usually(
  fc.oneof(
    fc.constantFrom({ type: "text" }, { type: "json_object" }),
    fc.record({
      type: fc.constant("json_schema"),
      json_schema: fc.record({ name: schemaName, schema: sometimes(rootSchema, 85), strict: sometimes(fc.boolean()) }),
    }),
  ),
  fc.constantFrom({ type: "json_schema" }, { type: "xml" }, "json_object"),
  20,
);

// ---- tools and histories, shaped per protocol from shared parts ---------------------------------

type ToolSpec = { name: unknown; description: unknown; schema: unknown };
// Descriptions short: a tool list's prompt must leave room in the 512-token context for most to be served.
const toolSpec = fc.record({
  name: toolName,
  description: sometimes(fc.oneof(fc.constantFrom(...SPECIAL_TEXT), fc.string({ maxLength: 20 }))),
  schema: sometimes(rootSchema, 67),
});
/** A few tools of distinct names, or two of one name, or a list past the limit of 128 (one spec renamed), or garbage. */
const toolList = (shape: (spec: ToolSpec) => unknown) =>
  usually(
    fc.oneof(
      { weight: 20, arbitrary: fc.uniqueArray(toolSpec, { selector: (spec) => spec.name, minLength: 1, maxLength: 4 }).map((specs) => specs.map(shape)) },
      { weight: 1, arbitrary: fc.array(toolSpec, { minLength: 2, maxLength: 4 }).map((specs) => [...specs, specs[0]!].map(shape)) },
      {
        weight: 1,
        arbitrary: fc
          .tuple(toolSpec, fc.integer({ min: 100, max: 200 }))
          .map(([spec, count]) => Array.from({ length: count }, (_, i) => shape({ ...spec, name: `${String(spec.name)}${i}` }))),
      },
    ),
  );
/** Tools and a choice, in the protocol's shapes: mostly none, else tools with or without a choice, now and then a choice alone. */
const tooling = (shape: (spec: ToolSpec) => unknown, choice: fc.Arbitrary<unknown>) =>
  fc.oneof(
    { weight: 6, arbitrary: fc.constant({}) },
    { weight: 3, arbitrary: fc.record({ tools: toolList(shape), tool_choice: field(choice, 50) }) },
    { weight: 1, arbitrary: fc.record({ tool_choice: usually(choice) }) },
  );

/** Up to 400 short turns before the drawn ones: most histories are short, some far outgrow the context. */
const filler = fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.integer({ min: 1, max: 400 }) });
/**
 * A history: filler turns, then drawn ones (each one message, or a call and its results), in one
 * of six an `odd` message among them (what the protocol refuses), and, where `last` is given, most
 * ending with it (Anthropic's protocol refuses any other ending). Now and then none at all.
 */
const history = (turn: fc.Arbitrary<unknown[]>, odd: fc.Arbitrary<unknown>, last?: fc.Arbitrary<unknown>) =>
  usually(
    fc
      .record({
        count: filler,
        drawn: fc.array(turn, { minLength: 1, maxLength: 5 }),
        odd: sometimes(odd, 16),
        at: fc.nat(6),
        ending: last ? sometimes(last, 80) : fc.constant(undefined),
      })
      .map(({ count, drawn, odd, at, ending }) => {
        const messages = drawn.flat();
        if (odd !== undefined) messages.splice(at, 0, odd);
        return [
          ...Array.from({ length: count }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `word${i % 7}` })),
          ...messages,
          ...(ending === undefined ? [] : [ending]),
        ];
      }),
    fc.constant([]),
  );
const one = (message: fc.Arbitrary<unknown>) => message.map((m) => [m]);
/** Calls, then results answering them in order, as a client sends them back (some calls left unanswered). */
const callsAndResults = <C, R>(call: fc.Arbitrary<C>, results: fc.Arbitrary<R[]>, turn: (calls: C[], results: R[]) => unknown[]) =>
  fc.tuple(fc.array(call, { minLength: 1, maxLength: 3 }), results).map(([calls, answers]) => turn(calls, answers));

const openAiCall = fc.record({ id: callId, type: fc.constant("function"), function: fc.record({ name: toolName, arguments: callArguments }) });
const openAiContent = fc.oneof(
  { weight: 3, arbitrary: text },
  { weight: 1, arbitrary: fc.array(fc.record({ type: fc.constant("text"), text }), { maxLength: 3 }) },
);
const openAiTurn = fc.oneof(
  { weight: 3, arbitrary: one(fc.record({ role: fc.constantFrom("system", "developer", "user"), content: openAiContent })) },
  {
    weight: 2,
    arbitrary: one(fc.record({ role: fc.constant("assistant"), content: fc.option(openAiContent, { nil: null }), reasoning_content: sometimes(text) })),
  },
  {
    weight: 2,
    arbitrary: callsAndResults(openAiCall, fc.array(openAiContent, { maxLength: 3 }), (calls, results) => [
      { role: "assistant", content: null, tool_calls: calls },
      ...results.map((content, i) => ({ role: "tool", tool_call_id: calls[i % calls.length]!.id, content })),
    ]),
  },
);
const oddOpenAiMessage = fc.oneof(
  fc.record(
    { role: fc.constantFrom("function", "tool", "user", "assistant"), content: garbage, tool_calls: garbage, tool_call_id: garbage, name: garbage },
    { requiredKeys: ["role"] },
  ),
  fc.record({
    role: fc.constantFrom("user", "assistant", "tool"),
    tool_call_id: callId,
    content: fc.constantFrom([{ type: "refusal", refusal: "no" }], [{ type: "image_url", image_url: { url: "data:," } }], "orphan result"),
  }),
);

const itemId = sometimes(fc.constantFrom("msg_1", "fc_1", "rs_1", "x", ""), 25);
const itemPart = fc.record({ type: fc.constantFrom("input_text", "output_text"), text });
const responsesTurn = fc.oneof(
  {
    weight: 4,
    arbitrary: one(
      fc.record({
        type: sometimes(fc.constant("message"), 50),
        id: itemId,
        role: fc.constantFrom("user", "system", "developer", "assistant"),
        content: fc.oneof(text, fc.array(itemPart, { maxLength: 3 })),
      }),
    ),
  },
  {
    weight: 1,
    arbitrary: one(
      fc.record({
        type: fc.constant("reasoning"),
        id: itemId,
        summary: fc.constant([]),
        content: sometimes(fc.array(fc.record({ type: fc.constant("reasoning_text"), text }), { maxLength: 2 }), 50),
      }),
    ),
  },
  {
    weight: 2,
    arbitrary: callsAndResults(
      fc.record({ type: fc.constant("function_call"), id: itemId, call_id: callId, name: toolName, arguments: callArguments }),
      fc.array(text, { maxLength: 3 }),
      (calls, results) => [...calls, ...results.map((output, i) => ({ type: "function_call_output", call_id: calls[i % calls.length]!.call_id, output }))],
    ),
  },
);
const oddResponsesItem = fc.oneof(
  fc.record({ type: fc.constant("item_reference"), id: fc.oneof(fc.constantFrom("msg_1", "fc_1"), fc.string({ maxLength: 10 })) }),
  fc.record({ role: fc.constant("user"), content: fc.constant([{ type: "input_image", image_url: "data:," }]) }),
  fc.record({ type: fc.constant("function_call_output"), call_id: callId, output: text }),
  garbage,
);

const textBlock = fc.record({ type: fc.constant("text"), text, cache_control: sometimes(fc.constant({ type: "ephemeral" }), 25) });
const thinkingBlock = fc.record({ type: fc.constant("thinking"), thinking: text, signature: fc.constantFrom("", "sig") });
const anthropicContent = fc.oneof(text, fc.array(textBlock, { minLength: 1, maxLength: 3 }));
const anthropicQuestion = fc.record({ role: fc.constant("user"), content: anthropicContent });
const anthropicTurn = fc.oneof(
  { weight: 3, arbitrary: one(anthropicQuestion) },
  {
    weight: 2,
    arbitrary: one(
      fc.record({ role: fc.constant("assistant"), content: fc.oneof(text, fc.array(fc.oneof(textBlock, thinkingBlock), { minLength: 1, maxLength: 3 })) }),
    ),
  },
  {
    weight: 2,
    arbitrary: callsAndResults(
      fc.record({
        type: fc.constant("tool_use"),
        id: callId,
        name: toolName,
        input: fc.dictionary(fc.string({ maxLength: 5 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
      }),
      fc.array(fc.record({ content: sometimes(anthropicContent, 67), is_error: sometimes(fc.boolean()) }), { maxLength: 3 }),
      (calls, results) => [
        { role: "assistant", content: calls },
        {
          role: "user",
          content: results.length === 0 ? "go on" : results.map((result, i) => ({ type: "tool_result", tool_use_id: calls[i % calls.length]!.id, ...result })),
        },
      ],
    ),
  },
);
const oddAnthropicMessage = fc.oneof(
  fc.record({ role: fc.constantFrom("system", "tool", "user"), content: garbage }),
  fc.record({
    role: fc.constantFrom("user", "assistant"),
    content: fc.constantFrom(
      [{ type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }],
      [{ type: "redacted_thinking", data: "x" }],
      [{ type: "document" }],
      [{ type: "tool_use", id: "c1", name: "f", input: [] }],
      [{ type: "tool_result", tool_use_id: "none" }],
    ),
  }),
);

// ---- each route's bodies ------------------------------------------------------------------------

/** OpenAI's tool choices, a named one in the shape of `named` (chat completions' and Responses' differ). */
const openAiChoice = (named: (name: unknown) => object) => fc.oneof(fc.constantFrom("auto", "none", "required"), toolName.map(named));

const conversationId = usually(
  fc.nat().map((i) => conversations[i % conversations.length]!),
  fc.constantFrom("conv_unknown", ":x", "a".repeat(129)),
  10,
);
const responseId = usually(
  fc.nat().map((i) => keptResponses[i % keptResponses.length]!),
  fc.constantFrom("resp_unknown", "resp_", "x"),
  4,
);
/** Fields joined into one body: the tool fields are drawn together, so that a choice mostly has tools to choose from. */
const merged = (...parts: fc.Arbitrary<object>[]) => fc.tuple(...parts).map((drawn) => Object.assign({}, ...drawn) as Record<string, unknown>);

const nativeBody = fc.record({
  message: usually(text),
  conversation_id: usually(conversationId),
  max_tokens: usually(replyLength),
  stream: field(fc.boolean(), 50),
  temperature: field(unit),
  seed: field(fc.nat()),
  response_format: field(responseFormat),
  model: field(modelName, 20),
  top_p: field(unit, 17),
});

const chatCompletionBody = merged(
  fc.record({
    model: field(modelName, 50),
    messages: usually(history(openAiTurn, oddOpenAiMessage)),
    max_tokens: usually(replyLength),
    max_completion_tokens: field(replyLength, 25),
    stream: field(fc.boolean(), 50),
    stream_options: field(fc.record({ include_usage: fc.boolean(), include_obfuscation: fc.boolean() }, { requiredKeys: [] }), 25),
    temperature: field(fc.double({ min: 0, max: 2, noNaN: true })),
    top_p: field(unit, 20),
    seed: field(fc.integer()),
    stop: field(fc.oneof(text, fc.array(text, { maxLength: 5 })), 25),
    logit_bias: field(
      fc.dictionary(fc.oneof(fc.nat(40_000).map(String), fc.string({ maxLength: 4 })), fc.double({ min: -100, max: 100, noNaN: true }), { maxKeys: 3 }),
      17,
    ),
    logprobs: field(fc.boolean(), 20),
    top_logprobs: field(fc.integer({ min: 0, max: 20 }), 17),
    n: field(fc.constantFrom(1, 2), 12),
    parallel_tool_calls: field(fc.boolean(), 20),
    response_format: field(responseFormat, 25),
  }),
  tooling(
    (spec) => ({ type: "function", function: { name: spec.name, description: spec.description, parameters: spec.schema } }),
    openAiChoice((name) => ({ type: "function", function: { name } })),
  ),
);

const textCompletionBody = fc.record({
  model: field(modelName, 50),
  prompt: usually(fc.oneof(text, fc.array(text, { maxLength: 2 }), fc.array(fc.nat(2000), { maxLength: 3 }))),
  max_tokens: usually(replyLength),
  stream: field(fc.boolean(), 50),
  stream_options: field(fc.record({ include_usage: fc.boolean() }, { requiredKeys: [] }), 25),
  temperature: field(fc.double({ min: 0, max: 2, noNaN: true })),
  seed: field(fc.integer()),
  stop: field(fc.oneof(text, fc.array(text, { maxLength: 5 })), 25),
  logprobs: field(fc.integer({ min: 0, max: 6 }), 25),
  echo: field(fc.boolean(), 25),
  suffix: field(text, 8),
  n: field(fc.constantFrom(1, 2), 12),
  best_of: field(fc.constantFrom(1, 2), 12),
  logit_bias: field(fc.dictionary(fc.nat(40_000).map(String), fc.double({ min: -100, max: 100, noNaN: true }), { maxKeys: 3 }), 12),
});

const responsesBody = merged(
  fc.record({
    model: field(modelName, 50),
    input: usually(fc.oneof({ weight: 1, arbitrary: text }, { weight: 3, arbitrary: history(responsesTurn, oddResponsesItem) })),
    instructions: field(text),
    max_output_tokens: usually(replyLength),
    stream: field(fc.boolean(), 50),
    previous_response_id: field(responseId, 15),
    conversation: field(
      fc.oneof(
        conversationId,
        conversationId.map((id) => ({ id })),
      ),
      15,
    ),
    text: field(
      fc.record({
        format: fc.oneof(
          fc.constantFrom({ type: "text" }, { type: "json_object" }),
          fc.record({ type: fc.constant("json_schema"), name: schemaName, schema: rootSchema, strict: field(fc.boolean()) }),
        ),
      }),
      25,
    ),
    parallel_tool_calls: field(fc.boolean(), 20),
    temperature: field(fc.double({ min: 0, max: 2, noNaN: true }), 25),
  }),
  // Kept now and then (continued by later cases), in the background at times; not kept mostly.
  fc.oneof(
    { weight: 12, arbitrary: fc.constant({ store: false }) },
    { weight: 2, arbitrary: fc.constantFrom({}, { store: true }) },
    { weight: 2, arbitrary: fc.constant({ store: true, background: true }) },
    { weight: 1, arbitrary: fc.record({ store: garbage, background: fc.oneof(fc.boolean(), garbage) }) },
  ),
  tooling(
    (spec) => ({ type: "function", name: spec.name, description: spec.description, parameters: spec.schema }),
    openAiChoice((name) => ({ type: "function", name })),
  ),
);

const anthropicBody = merged(
  fc.record({
    model: usually(modelName),
    max_tokens: usually(replyLength),
    messages: usually(history(anthropicTurn, oddAnthropicMessage, anthropicQuestion)),
    system: field(fc.oneof(text, fc.array(textBlock, { maxLength: 2 }))),
    stop_sequences: field(fc.array(text, { maxLength: 3 }), 25),
    thinking: field(
      fc.oneof(
        fc.record({ type: fc.constant("enabled"), budget_tokens: fc.integer({ min: -1, max: 8 }) }),
        fc.constantFrom({ type: "adaptive" }, { type: "disabled" }, { type: "adaptive", display: "omitted" }),
      ),
      15,
    ),
    stream: field(fc.boolean(), 50),
    temperature: field(unit, 25),
    top_k: field(fc.nat(50), 17),
  }),
  // Anthropic's tools need a schema: one left out is an empty object's.
  tooling(
    (spec) => ({ name: spec.name, description: spec.description, input_schema: spec.schema ?? { type: "object" } }),
    fc.oneof(
      fc.constantFrom({ type: "auto" }, { type: "any" }, { type: "none" }, { type: "any", disable_parallel_tool_use: true }),
      toolName.map((name) => ({ type: "tool", name })),
    ),
  ),
);
/** count_tokens takes a subset of the fields: mostly that subset, now and then the whole request. */
const countTokensBody = fc
  .tuple(anthropicBody, usually(fc.constant(false), fc.constant(true), 12))
  .map(([{ model, messages, system, thinking, tools, tool_choice, ...rest }, whole]) => ({
    model,
    messages,
    system,
    thinking,
    tools,
    tool_choice,
    ...(whole ? rest : {}),
  }));

// ---- retrieval ----------------------------------------------------------------------------------

const retrievalModel = field(fc.constantFrom("parley-embed", "parley-rerank", "parley", "parley-demo", "x", ""), 60);
const tokenIds = fc.array(usually(fc.nat(1200), fc.constantFrom(-1, 1.5, 2 ** 31, 1e9, "1"), 10), { minLength: 0, maxLength: 6 });
const embeddingsBody = fc.record({
  model: retrievalModel,
  input: usually(fc.oneof(text, fc.array(text, { maxLength: 5 }), tokenIds, fc.array(tokenIds, { maxLength: 4 }))),
  encoding_format: field(fc.constantFrom("float", "base64", "hex")),
  dimensions: field(fc.constantFrom(256, 1, 64, 0, 1e9)),
  user: field(text, 10),
});
const rerankBody = fc.record({
  model: retrievalModel,
  query: usually(text),
  documents: usually(fc.array(text, { maxLength: 6 })),
  top_n: field(bound),
  return_documents: field(fc.boolean()),
});
const ollamaOptions = field(fc.record({ temperature: field(unit), num_ctx: field(fc.nat(4096), 10), num_thread: field(fc.nat(8), 10) }), 20);
const ollamaEmbedBody = fc.record({
  model: usually(fc.constantFrom("parley-embed", "parley-rerank", "parley")),
  input: usually(fc.oneof(text, fc.array(text, { maxLength: 5 }))),
  truncate: field(fc.boolean()),
  dimensions: field(fc.constantFrom(256, 3)),
  options: ollamaOptions,
  keep_alive: field(fc.constantFrom("5m", 0, -1)),
});
const ollamaEmbeddingsBody = fc.record({ model: usually(fc.constantFrom("parley-embed", "parley")), prompt: usually(text), options: ollamaOptions });

// ---- Ollama's turns ----------------------------------------------------------------------------

/** Options Ollama's clients send that Parley does not honour, and names that are no option's but an object's. */
const oddOption = fc.constantFrom("mirostat", "num_keep", "num_ctx", "typical_p", "constructor", "toString", "__proto__", "hasOwnProperty");
const ollamaTurnOptions = fc
  .tuple(
    fc.record(
      {
        num_predict: usually(replyLength, fc.constantFrom(-2, -1, 0, 1.5, "2", null), 40),
        temperature: field(fc.double({ min: 0, max: 2, noNaN: true })),
        top_p: field(unit, 20),
        top_k: field(fc.nat(50), 20),
        seed: field(fc.nat(), 20),
        stop: field(fc.array(text, { maxLength: 3 }), 20),
        repeat_penalty: field(fc.double({ min: 0.5, max: 2, noNaN: true }), 15),
        num_thread: field(fc.nat(8), 10),
      },
      { requiredKeys: ["num_predict"] },
    ),
    sometimes(fc.tuple(oddOption, garbage), 8) as fc.Arbitrary<[string, unknown] | undefined>,
  )
  // A computed key is an own key, `__proto__` too, so JSON carries it as a client's would.
  .map(([options, odd]) => (odd ? { [odd[0]]: odd[1], ...options } : options));
const ollamaCall = fc.record({
  function: fc.record({ name: toolName, arguments: fc.dictionary(fc.string({ maxLength: 5 }), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 2 }) }),
});
const ollamaTurn = fc.oneof(
  {
    weight: 5,
    arbitrary: one(
      fc.record({ role: fc.constantFrom("system", "user", "assistant"), content: text, thinking: sometimes(text, 10) }, { requiredKeys: ["role", "content"] }),
    ),
  },
  {
    weight: 2,
    arbitrary: callsAndResults(ollamaCall, fc.array(text, { maxLength: 3 }), (calls, results) => [
      { role: "assistant", content: "", tool_calls: calls },
      ...results.map((content, i) => ({ role: "tool", content, tool_name: calls[i % calls.length]!.function.name })),
    ]),
  },
);
const oddOllamaMessage = fc.record(
  { role: fc.constantFrom("function", "user", "developer"), content: garbage, images: garbage, tool_calls: garbage },
  { requiredKeys: ["role"] },
);
/** What Ollama's turn routes share: the model, streaming (their default), a reply format, options, thinking, keep-alive. */
const ollamaTurnFields = {
  model: usually(modelName),
  stream: field(fc.boolean(), 70),
  format: field(fc.oneof(fc.constant("json"), rootSchema), 15),
  options: usually(ollamaTurnOptions),
  think: field(fc.boolean(), 10),
  keep_alive: field(fc.constantFrom("5m", -1, "1h", "bad"), 10),
};
const ollamaChatBody = fc.record({
  ...ollamaTurnFields,
  messages: usually(history(ollamaTurn, oddOllamaMessage)),
  tools: field(
    toolList((spec) => ({ type: "function", function: { name: spec.name, description: spec.description, parameters: spec.schema } })),
    20,
  ),
});
const ollamaGenerateBody = fc.record({
  ...ollamaTurnFields,
  prompt: usually(text),
  system: field(text, 20),
  // Refused by name: Parley writes every prompt through the template and keeps no token context here.
  raw: field(fc.boolean(), 4),
  context: field(fc.array(fc.nat(100), { maxLength: 3 }), 4),
});

// ---- pictures: adversarial bytes in every field that carries one, counts around the cap ---------

const VALID_PICTURES = Object.values(VISION_IMAGES).map((draw) => draw());
/** A side as a header declares it: small, at the limits, or far past them. */
const side = fc.oneof(fc.integer({ min: 1, max: 64 }), fc.constantFrom(0, 4096, 4097, 16_384, 65_535, 2 ** 31 - 1, 2 ** 32 - 1));
const side16 = side.map((value) => Math.min(value, 65_535));
const MAGIC = [
  [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a],
  [...new TextEncoder().encode("GIF89a")],
  [0xff, 0xd8],
  [0x42, 0x4d],
  [...new TextEncoder().encode("RIFF\0\0\0\0WEBP")],
];
const pictureBytes: fc.Arbitrary<Uint8Array> = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(...VALID_PICTURES) },
  // Cut short anywhere.
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom(...VALID_PICTURES), fc.nat()).map(([picture, at]) => picture.subarray(0, at % picture.length)) },
  // Apple's CgBI chunk before the real IHDR, as the hostile run's bomb.
  {
    weight: 1,
    arbitrary: fc
      .tuple(side, side)
      .map(([width, height]) =>
        pngOf([pngChunk("CgBI", ihdr(1, 1)), pngChunk("IHDR", ihdr(width, height, "grey")), pngChunk("IDAT", deflateRawSync(new Uint8Array(64)))]),
      ),
  },
  // A declared size with far less data than it needs.
  {
    weight: 1,
    arbitrary: fc
      .tuple(side, side)
      .map(([width, height]) => pngOf([pngChunk("IHDR", ihdr(width, height, "grey")), pngChunk("IDAT", deflateSync(new Uint8Array(64)))])),
  },
  // Frames anywhere, within the screen or not, or none.
  {
    weight: 1,
    arbitrary: fc
      .tuple(side16, side16, fc.array(fc.record({ left: fc.nat(80), top: fc.nat(80), width: side16, height: side16 }), { maxLength: 3 }))
      .map(([width, height, frames]) => gif({ width, height }, frames)),
  },
  // No start of frame, or frames of any size.
  { weight: 1, arbitrary: fc.array(fc.record({ width: side16, height: side16 }), { maxLength: 2 }).map((frames) => jpeg(frames)) },
  // A format's first bytes, then anything; or anything, nothing among it.
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom(...MAGIC), fc.uint8Array({ maxLength: 64 })).map(([magic, rest]) => Uint8Array.from([...magic, ...rest])) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }) },
);
/** A picture in base64, now and then line-wrapped, now and then no base64 at all. */
const base64Picture = usually(
  fc.tuple(pictureBytes, fc.boolean()).map(([bytes, wrapped]) => {
    const base64 = Buffer.from(bytes).toString("base64");
    return wrapped ? (base64.match(/.{1,76}/g) ?? []).join("\n") : base64;
  }),
  fc.constantFrom("", " ", "!!!!", "abc", "====", "iVBORw0KGgo", "data:image/png;base64,iVBORw0KGgo=", "\u0000", "💥"),
  8,
);
const MEDIA_TYPES = [
  "image/png",
  "image/jpeg",
  "image/gif",
  "",
  "IMAGE/PNG",
  "image/webp",
  "text/plain",
  "application/octet-stream",
  "image/svg+xml",
  "image/png;charset=utf-8",
];
/** A picture as a URL: a data URL of any media type, or no data URL, or a host the operator did not list. */
const pictureUrl = usually(
  fc.tuple(fc.constantFrom(...MEDIA_TYPES), base64Picture).map(([type, data]) => `data:${type};base64,${data}`),
  fc.constantFrom(
    "data:,",
    "data:image/png,abc",
    "data:image/png;base64",
    "https://example.com/a.png",
    "http://127.0.0.1:1/a.png",
    "file:///etc/passwd",
    "",
    "ftp://x/y.png",
  ),
  8,
);
/** A request's pictures: mostly a few, one time in five around the most a request may have. */
const pictures = <T>(picture: fc.Arbitrary<T>, cap: number = PICTURE_LIMITS.perRequest) =>
  fc
    .oneof({ weight: 4, arbitrary: fc.integer({ min: 0, max: 3 }) }, { weight: 1, arbitrary: fc.integer({ min: cap - 1, max: cap + 1 }) })
    .chain((count) => fc.array(picture, { minLength: count, maxLength: count }));
/** The model that sees pictures where there is one; now and then one that cannot. */
const pictureModel = natives === undefined ? fc.constant("demo") : usually(fc.constant(VISION_MODEL_NAME), fc.constantFrom("demo", "parley-embed"), 5);

const openAiPictureBody = fc.record({
  model: pictureModel,
  max_tokens: replyLength,
  stream: field(fc.boolean(), 50),
  messages: fc
    .tuple(text, pictures(usually(fc.record({ url: pictureUrl, detail: sometimes(fc.constantFrom("low", "high", "auto", "x"), 20) }), garbage, 20)))
    .map(([question, images]) => [
      { role: "user", content: [{ type: "text", text: question }, ...images.map((image_url) => ({ type: "image_url", image_url }))] },
    ]),
});
const responsesPictureBody = fc.record({
  model: pictureModel,
  max_output_tokens: replyLength,
  store: fc.constant(false),
  stream: field(fc.boolean(), 50),
  input: fc
    .tuple(text, pictures(pictureUrl))
    .map(([question, urls]) => [
      { role: "user", content: [{ type: "input_text", text: question }, ...urls.map((image_url) => ({ type: "input_image", image_url }))] },
    ]),
});
const anthropicSource = fc.oneof(
  { weight: 6, arbitrary: fc.record({ type: fc.constant("base64"), media_type: fc.constantFrom(...MEDIA_TYPES), data: base64Picture }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant("url"), url: pictureUrl }) },
  { weight: 1, arbitrary: garbage },
);
const anthropicPictureBody = fc.record({
  model: pictureModel,
  max_tokens: replyLength,
  stream: field(fc.boolean(), 50),
  messages: fc
    .tuple(text, pictures(anthropicSource))
    .map(([question, sources]) => [{ role: "user", content: [...sources.map((source) => ({ type: "image", source })), { type: "text", text: question }] }]),
});
const ollamaPictureTurn = { model: pictureModel, stream: field(fc.boolean(), 50), options: fc.record({ num_predict: replyLength }) };
const ollamaChatPictureBody = fc.record({
  ...ollamaPictureTurn,
  messages: fc.tuple(text, pictures(base64Picture)).map(([content, images]) => [{ role: "user", content, images }]),
});
const ollamaGeneratePictureBody = fc.record({ ...ollamaPictureTurn, prompt: text, images: pictures(base64Picture) });
/** The native API takes fewer pictures a message than the other protocols a request. */
const NATIVE_IMAGES = 8;
const nativePictureBody = fc.record({
  conversation_id: conversationId,
  model: pictureModel,
  message: text,
  images: pictures(base64Picture, NATIVE_IMAGES),
  max_tokens: replyLength,
  stream: field(fc.boolean(), 50),
});

/** The body's JSON, or now and then something that is not a request at all. */
const RAW = [
  "",
  "{",
  "null",
  "[]",
  '"hi"',
  '{"messages":[],}',
  '{"model":"x","model":1}',
  '{"max_tokens":1e999}',
  "\ufeff{}",
  `${'{"a":'.repeat(5000)}1${"}".repeat(5000)}`,
];
const wire = (body: fc.Arbitrary<unknown>) =>
  fc.oneof(
    { weight: 20, arbitrary: body.map((value) => JSON.stringify(value)) },
    {
      weight: 1,
      arbitrary: fc.oneof(
        fc.constantFrom(...RAW),
        fc.jsonValue().map((value) => JSON.stringify(value)),
      ),
    },
  );

const anthropicKey = fc.constantFrom<Record<string, string>>(
  { "x-api-key": alice.key },
  { "x-api-key": alice.key, "anthropic-version": "2023-06-01" },
  bearer(alice.key),
);
const ROUTES: { path: string; body: fc.Arbitrary<string>; headers: fc.Arbitrary<Record<string, string>> }[] = [
  { path: "/api/v1.0/chat", body: wire(nativeBody), headers: fc.constant(bearer(alice.key)) },
  { path: "/v1/chat/completions", body: wire(chatCompletionBody), headers: fc.constant(bearer(alice.key)) },
  { path: "/v1/responses", body: wire(responsesBody), headers: fc.constant(bearer(alice.key)) },
  { path: "/v1/messages", body: wire(anthropicBody), headers: anthropicKey },
  { path: "/v1/messages/count_tokens", body: wire(countTokensBody), headers: anthropicKey },
  { path: "/v1/completions", body: wire(textCompletionBody), headers: fc.constant(bearer(alice.key)) },
  { path: "/v1/embeddings", body: wire(embeddingsBody), headers: fc.constant(bearer(alice.key)) },
  { path: "/v1/rerank", body: wire(rerankBody), headers: fc.constant(bearer(alice.key)) },
  { path: "/api/embed", body: wire(ollamaEmbedBody), headers: fc.constant(bearer(alice.key)) },
  { path: "/api/embeddings", body: wire(ollamaEmbeddingsBody), headers: fc.constant(bearer(alice.key)) },
  { path: "/api/chat", body: wire(ollamaChatBody), headers: fc.constant(bearer(alice.key)) },
  { path: "/api/generate", body: wire(ollamaGenerateBody), headers: fc.constant(bearer(alice.key)) },
];
/** Every route that carries pictures, given pictures of every kind: fewer cases, as each decodes its pictures. */
const PICTURE_ROUTES: typeof ROUTES = [
  { path: "/api/v1.0/chat", body: wire(nativePictureBody), headers: fc.constant(bearer(alice.key)) },
  { path: "/v1/chat/completions", body: wire(openAiPictureBody), headers: fc.constant(bearer(alice.key)) },
  { path: "/v1/responses", body: wire(responsesPictureBody), headers: fc.constant(bearer(alice.key)) },
  { path: "/v1/messages", body: wire(anthropicPictureBody), headers: anthropicKey },
  { path: "/api/chat", body: wire(ollamaChatPictureBody), headers: fc.constant(bearer(alice.key)) },
  { path: "/api/generate", body: wire(ollamaGeneratePictureBody), headers: fc.constant(bearer(alice.key)) },
];

// ---- one exchange -------------------------------------------------------------------------------

/** The codes each protocol gives an internal failure: the native and OpenAI's, then Anthropic's. */
const INTERNAL = new Set(["internal", "server_error", "api_error"]);

/** An internal error carried by a 200's JSON or an event's data, whichever protocol's shape it has. */
function internalError(data: unknown): string | undefined {
  const value = data as { error?: { code?: unknown; type?: unknown }; code?: unknown; response?: { error?: unknown } } | null;
  for (const error of [value?.error, value, value?.response?.error] as ({ code?: unknown; type?: unknown } | null | undefined)[]) {
    if (error && (INTERNAL.has(String(error.code)) || INTERNAL.has(String(error.type)))) return JSON.stringify(error).slice(0, 300);
  }
  return undefined;
}

/** A background response ends whatever its client does: it is waited for, so that what it logs is this case's. */
async function backgroundEnding(id: string): Promise<unknown> {
  let kept: { status?: string } = {};
  await until(
    async () => {
      const response = await fetch(`${served.url}/v1/responses/${id}`, { headers: bearer(alice.key), signal: AbortSignal.timeout(DEADLINE_MS) });
      kept = (await response.json()) as typeof kept;
      return kept.status !== "in_progress";
    },
    `background response ${id} to end`,
    DEADLINE_MS,
    20,
  );
  return kept;
}

function parsed(text: string, problems: string[]): unknown {
  try {
    return JSON.parse(text);
  } catch {
    problems.push(`a body or event that is not JSON: ${text.slice(0, 200)}`);
    return undefined;
  }
}

/** Sends one body and reads its answer whole, streams to their end; returns its status and what is wrong with it. */
async function exchange(path: string, body: string, headers: Record<string, string>): Promise<{ status: number; problems: string[] }> {
  logLines.length = 0;
  const requestId = `fuzz-${++requests}`;
  const problems: string[] = [];
  const payloads: unknown[] = [];
  let status = 0;
  try {
    const response = await fetch(`${served.url}${path}`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/json", "x-request-id": requestId },
      body,
      signal: AbortSignal.timeout(DEADLINE_MS),
    });
    status = response.status;
    const type = response.headers.get("content-type") ?? "";
    if (type.startsWith("text/event-stream")) {
      for await (const event of sseEvents(response)) if (event.event !== "comment" && event.data !== "[DONE]") payloads.push(parsed(event.data, problems));
    } else if (type.startsWith("application/x-ndjson")) {
      for (const line of (await response.text()).split("\n")) if (line !== "") payloads.push(parsed(line, problems));
    } else {
      payloads.push(parsed(await response.text(), problems));
    }
  } catch (error) {
    if ((error as Error).name !== "TimeoutError") throw error;
    return { status, problems: [`no whole answer within ${DEADLINE_MS} ms`] };
  }
  if (status >= 500) problems.push(`status ${status}: ${JSON.stringify(payloads[0]).slice(0, 300)}`);
  if (status === 200) {
    // A Responses reply is the response, or events that carry it.
    const kept = payloads
      .map((data) => (data as { response?: unknown })?.response ?? data)
      .find((data) => (data as { object?: string })?.object === "response") as { id: string; store: boolean; background: boolean } | undefined;
    if (kept?.background) payloads.push(await backgroundEnding(kept.id));
    if (kept?.store) keptResponses.push(kept.id);
    problems.push(...payloads.flatMap((data) => internalError(data) ?? []).map((error) => `an internal error in a 200: ${error}`));
  }
  // The request's own line comes last, once its stream has ended: what it logged is all there.
  const ownLine = (line: string) => line.includes(`"request_id":"${requestId}"`) && line.includes('"msg":"request"');
  await until(() => logLines.some(ownLine), `request ${requestId}'s log line`, DEADLINE_MS);
  problems.push(...logLines.filter(isErrorLine).map((line) => `logged: ${line.slice(0, 600)}`));
  return { status, problems };
}

describe("random and adversarial bodies on every generating and retrieval route", () => {
  for (const [route, cases, label] of [
    ...ROUTES.map((route) => [route, CASES, route.path] as const),
    ...PICTURE_ROUTES.map((route) => [route, PICTURE_CASES, `${route.path} (pictures)`] as const),
  ]) {
    test(
      `POST ${label}: ${cases} bodies, no 5xx, no internal error, nothing logged at error level`,
      async () => {
        const counts = new Map<number, number>();
        statuses.set(label, counts);
        await fc.assert(
          fc.asyncProperty(route.body, route.headers, async (body, headers) => {
            const { status, problems } = await exchange(route.path, body, headers);
            counts.set(status, (counts.get(status) ?? 0) + 1);
            if (problems.length > 0) throw new Error(`POST ${route.path} answered ${status}:\n${problems.join("\n")}`);
          }),
          { numRuns: cases, seed: testSeed },
        );
      },
      // Room for a long run's cases and for fast-check to shrink a failing one.
      cases * 1_000 + 120_000,
    );
  }
});

test(`over every route's cases, this process's memory grows by less than ${RSS_GROWTH_MB} MB`, () => {
  const grownMb = (process.memoryUsage().rss - rssBefore) / 2 ** 20;
  console.log(`protocol fuzz: RSS ${Math.round(rssBefore / 2 ** 20)} MB before the cases, grown by ${Math.round(grownMb)} MB`);
  expect(requests).toBeGreaterThan(0);
  expect(grownMb).toBeLessThan(RSS_GROWTH_MB);
});
