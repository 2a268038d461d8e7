/**
 * `bun run bench schema [--rounds N]`: what the largest schemas Parley accepts (SCHEMA_LIMITS, at
 * each limit) cost. For each, the time of a one-token reply held to it against the same request
 * without it (the difference is building its grammar), and the stall it causes for another user:
 * that user's one-token requests, timed in rounds that alternate between running alone and beside a
 * client sending the largest schemas back to back. `parley serve` from source on the demo model.
 * Writes `.bench/schema-<time>.json`.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { SCHEMA_LIMITS } from "../src/llm/json-schema";
import { startServer } from "../test/support/process";
import { median, quantile } from "../test/support/stats";

const OUT = join(import.meta.dir, "..", ".bench");
const ADMIN_KEY = "pk_bench_schema_admin_key_0123456789";
const { values } = parseArgs({ args: Bun.argv.slice(2), options: { rounds: { type: "string", default: "6" } } });
const rounds = Number(values.rounds);
if (!Number.isInteger(rounds) || rounds < 2) throw new Error("--rounds must be an integer ≥ 2");

const { depth, repetition, elements } = SCHEMA_LIMITS;
const nested = (levels: number, leaf: object): object =>
  levels === 0 ? leaf : { type: "object", properties: { a: nested(levels - 1, leaf) }, required: ["a"] };
const repeated = { type: "array", items: { type: "integer" }, maxItems: repetition };
/** An object of `properties` enums whose values, with the properties and the root, make `budget` elements. */
const enumObject = (properties: number, budget: number) => {
  const values = Math.floor((budget - 1 - properties) / properties);
  return {
    type: "object",
    properties: Object.fromEntries(Array.from({ length: properties }, (_, p) => [`p${p}`, { enum: Array.from({ length: values }, (_, v) => `v${p}_${v}`) }])),
  };
};

const SCHEMAS: Record<string, object> = {
  [`nested ${depth} deep, repetitions ${repetition}`]: nested(depth - 3, {
    type: "object",
    properties: Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`k${i}`, repeated])),
  }),
  [`${elements} elements of enums`]: enumObject(100, elements),
  [`60 strings and arrays of ${repetition}`]: {
    type: "object",
    properties: Object.fromEntries(
      Array.from({ length: 30 }, (_, i) => [
        [`s${i}`, { type: "string", maxLength: repetition }],
        [`a${i}`, repeated],
      ]).flat(),
    ),
  },
};
/**
 * Tools are also shown to the model, so their prompt, not SCHEMA_LIMITS, bounds them first: 6 tools
 * of 10 enums of 5 values fill most of the demo model's context.
 */
const TOOLS = Array.from({ length: 6 }, (_, i) => ({ type: "function", function: { name: `tool_${i}`, parameters: enumObject(10, 61) } }));

const server = await startServer({ adminKey: ADMIN_KEY, env: { PARLEY_BODY_LIMIT: String(4 << 20), PARLEY_PARALLEL: "2", PARLEY_RATE_LIMIT: "0" } });
const ask = async (body: object) => {
  const started = performance.now();
  const response = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "any", messages: [{ role: "user", content: "Hello" }], max_tokens: 1, temperature: 0, ...body }),
  });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`status ${response.status}: ${text.slice(0, 300)}`);
  return performance.now() - started;
};
const format = (schema: object) => ({ response_format: { type: "json_schema", json_schema: { name: "x", schema } } });
const CASES: [string, object][] = [
  ...Object.entries(SCHEMAS).map(([name, schema]): [string, object] => [name, format(schema)]),
  ["6 tools of 10 enums", { tools: TOOLS, tool_choice: "required" }],
];

try {
  const builds: Record<string, { ms: number; bodyKb: number }> = {};
  for (const [name, body] of CASES) {
    await ask(body); // the first use compiles the JIT's paths
    const withSchema: number[] = [];
    const without: number[] = [];
    for (let r = 0; r < rounds; r++) {
      withSchema.push(await ask(body));
      without.push(await ask({}));
    }
    builds[name] = { ms: median(withSchema) - median(without), bodyKb: Math.round(JSON.stringify(body).length / 1024) };
  }

  // Another user's cheap requests, alone and beside the largest schemas sent back to back.
  const [heaviest] = Object.entries(builds).sort(([, a], [, b]) => b.ms - a.ms)[0]!;
  const heavy = CASES.find(([name]) => name === heaviest)![1];
  const stalls = { alone: [] as number[], beside: [] as number[] };
  for (let r = 0; r < rounds * 2; r++) {
    const beside = r % 2 === 1;
    let running = beside;
    const load = (async () => {
      while (running) await ask(heavy);
    })();
    for (let i = 0; i < 10; i++) stalls[beside ? "beside" : "alone"].push(await ask({}));
    running = false;
    await load;
  }

  const figures = (samples: number[]) => ({
    p50: Math.round(median(samples)),
    p99: Math.round(quantile(samples, 0.99)),
    max: Math.round(quantile(samples, 1)),
  });
  const result = { limits: SCHEMA_LIMITS, rounds, builds, heaviest, cheapRequestMs: { alone: figures(stalls.alone), besideHeaviest: figures(stalls.beside) } };
  console.log("schema                                     build ms   body KB");
  for (const [name, { ms, bodyKb }] of Object.entries(builds)) console.log(`${name.padEnd(42)} ${ms.toFixed(1).padStart(8)}   ${String(bodyKb).padStart(7)}`);
  console.log(
    `another user's 1-token request (ms), alone:          p50 ${result.cheapRequestMs.alone.p50}, p99 ${result.cheapRequestMs.alone.p99}, max ${result.cheapRequestMs.alone.max}`,
  );
  console.log(
    `  beside "${heaviest}" back to back: p50 ${result.cheapRequestMs.besideHeaviest.p50}, p99 ${result.cheapRequestMs.besideHeaviest.p99}, max ${result.cheapRequestMs.besideHeaviest.max}`,
  );
  mkdirSync(OUT, { recursive: true });
  const file = join(OUT, `schema-${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
  writeFileSync(file, JSON.stringify(result, null, 2));
  console.log(`written ${file}`);
} finally {
  await server.stop();
}
