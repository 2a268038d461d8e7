/**
 * `bun run tools/infill-fixture.ts`: what llama-server (built from the llama.cpp source
 * node-llama-cpp bundles, bench/perf/yardstick.ts) answers at `/infill` for the qwen2-coder preset,
 * written to test/fixtures/llama-server-infill.json with the model file's sha256. Each prompt's
 * tokens are read from its slot's saved state (`/slots/0?action=save`: the tokens the slot holds,
 * the prompt first), so the fixture holds exactly what llama-server evaluated. Then its answers with
 * `n_indent` on a model whose completion has indented lines (`indentModelGguf`), and its draws there
 * through sampler chains (`CHAIN_CASES`).
 * test/http/infill.test.ts checks Parley's prompts and completions against it.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startLlamaServer } from "../bench/perf/procs";
import { buildLlamaServer } from "../bench/perf/yardstick";
import { writePresetModel } from "../src/gguf/presets";
import { writeGguf } from "../src/gguf/writer";
import { fileSha256, tempDir } from "../test/support/files";
import {
  CHAIN_BODY,
  CHAIN_CASES,
  CHAIN_SEEDS,
  INDENT_BODY,
  INDENT_CASES,
  INFILL_BATCH,
  INFILL_CASES,
  INFILL_CONTEXT,
  INFILL_FIXTURE_PATH,
  INFILL_PREDICT,
  type IndentAnswer,
  type InfillAnswer,
  type InfillFixture,
  indentModelGguf,
} from "../test/support/infill";

const binary = await buildLlamaServer();
const dir = tempDir("infill-fixture");
const model = join(dir, "qwen2-coder.gguf");
await writePresetModel("qwen2-coder", model);
const slots = `${join(dir, "slots")}/`;
mkdirSync(slots);
const batch = String(INFILL_BATCH);
const serve = (file: string) =>
  startLlamaServer({
    binary,
    model: file,
    threads: 1,
    parallel: 1,
    contextSize: INFILL_CONTEXT,
    flags: ["-b", batch, "-ub", batch, "--slot-save-path", slots],
  });
let server = await serve(model);

const post = async (path: string, body: object): Promise<Response> => {
  const response = await fetch(`${server.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (!response.ok) throw new Error(`llama-server answered ${path} with ${response.status}: ${await response.text()}`);
  return response;
};

/**
 * The tokens the slot holds. A saved sequence state starts with its magic, version and a count of
 * 32-bit words (llama-context.cpp); llama-server's words there are its `server_tokens` packed
 * (server-common.cpp): a null token, the packing's version, the tokens' count, the tokens.
 */
async function slotTokens(name: string): Promise<number[]> {
  await post("/slots/0?action=save", { filename: name });
  const bytes = new DataView(await Bun.file(join(slots, name)).arrayBuffer());
  const word = (i: number) => bytes.getInt32(12 + 4 * i, true);
  if (word(0) !== -1) throw new Error("llama-server saved its slot's tokens in a packing this tool does not know");
  return Array.from({ length: word(2) }, (_, i) => word(3 + i));
}

/** The streamed events' pieces joined; the last event's `prompt`. */
async function streamed(body: object): Promise<{ content: string; prompt: string }> {
  const text = await (await post("/infill", { ...body, stream: true })).text();
  const events = text
    .split("\n")
    .filter((line) => line.startsWith("data: "))
    .map((line) => JSON.parse(line.slice(6)) as { content: string; prompt?: string });
  return { content: events.map((event) => event.content).join(""), prompt: events.at(-1)?.prompt ?? "" };
}

const answers: Record<string, InfillAnswer> = {};
try {
  for (const { name, body } of INFILL_CASES) {
    const request = { ...body, n_predict: INFILL_PREDICT, temperature: 0, cache_prompt: true };
    const plain = (await (await post("/infill", request)).json()) as { content: string; prompt: string; tokens_evaluated: number };
    const tokens = (await slotTokens(`${Object.keys(answers).length}.bin`)).slice(0, plain.tokens_evaluated);
    const stream = await streamed(request);
    if (stream.prompt !== plain.prompt) throw new Error(`${name}: the streamed prompt differs from the plain one`);
    answers[name] = { tokens, prompt: plain.prompt, content: plain.content, streamed: stream.content };
  }
} finally {
  await server.stop();
}

const indentModel = join(dir, "indent.gguf");
await writeGguf(indentModel, indentModelGguf());
server = await serve(indentModel);
const indented: Record<string, IndentAnswer> = {};
const chains: Record<string, string[]> = {};
try {
  for (const n_indent of INDENT_CASES) {
    const { content, stop_type, has_new_line, truncated, tokens_predicted } = (await (
      await post("/infill", { ...INDENT_BODY, n_indent })
    ).json()) as IndentAnswer;
    indented[n_indent] = { content, stop_type, has_new_line, truncated, tokens_predicted };
  }
  for (const [name, samplers] of Object.entries(CHAIN_CASES)) {
    chains[name] = [];
    for (const seed of CHAIN_SEEDS)
      chains[name].push(((await (await post("/infill", { ...CHAIN_BODY, samplers, seed })).json()) as { content: string }).content);
  }
} finally {
  await server.stop();
}
const fixture: InfillFixture = { sha256: await fileSha256(model), answers, chains, indent: { sha256: await fileSha256(indentModel), answers: indented } };
writeFileSync(INFILL_FIXTURE_PATH, `${JSON.stringify(fixture)}\n`);
// As the linter formats it, so that the file is lint-clean as written.
Bun.spawnSync(["bunx", "biome", "format", "--write", INFILL_FIXTURE_PATH], { stdout: "inherit", stderr: "inherit" });
console.log(`wrote ${INFILL_FIXTURE_PATH}`);
