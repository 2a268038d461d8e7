/**
 * `check.ts --llama-server <path> --preset bench-1b --type f16 --type q4_0 --models <dir> --work <dir>
 * [--binary <parley>] [--tokens 256] [--cpu]`, the GPU run's correctness check (bench/gpu/run.sh):
 * Parley's greedy replies on the path the benchmark measures against llama-server's own greedy
 * tokens, on the same file. Parley serves eight conversations at once through its native chat API
 * (`PARLEY_PARALLEL=8`, speculation off, no log-probabilities asked), so its replies run in native
 * runs of steps over a batch of eight; llama-server (`-np 8`) answers the same eight messages at
 * once with each token's log-probabilities. Both apply the model's own chat template to a lone
 * user message (Parley has no system prompt unless `PARLEY_SYSTEM_PROMPT` is set; the prompts'
 * token counts are compared to be sure).
 *
 * The replies are compared as bytes: where a stream first differs, the report names llama-server's
 * token index, its token and Parley's, llama-server's log-probabilities of both, and Parley's own
 * there, asked of its chat completions with `top_logprobs` for the same message: that is its
 * one-step path (native steps compute no log-probabilities), used only to report, and only where
 * its reply came to the same bytes. Kernels may order their sums otherwise from one batch shape to
 * another, which on a near-tie picks the other token: a difference where the two tokens are within
 * `NEAR_TIE` in log-probability (on either side) is a near-tie, anything else a fault; `spread` is
 * how far the two sides' log-probabilities of the same tokens lie apart there, what rounding does
 * to them. A reply that stops where the other goes on is a fault. Without `--cpu`, Parley runs on CUDA
 * (`PARLEY_GPU=cuda`) and llama-server with `-ngl 99`. Prints one JSON object per file type.
 */
import { rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { PRESET_FILE_TYPES, presetFileName, presetFileType, writePresetModel } from "../../src/gguf/presets";
import { compiledNativesDir } from "../../src/natives/compiled";
import { NODE_LLAMA_CPP_VERSION } from "../../src/natives/version";
import { installAlone } from "../../test/support/binary";
import { parleyTurn } from "../perf/clients";
import { ADMIN_KEY, launches, type Server, startLlamaServer, startParley } from "../perf/procs";
import { provenance } from "../perf/provenance";
import { userMessage } from "../perf/text";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    binary: { type: "string" },
    "llama-server": { type: "string" },
    preset: { type: "string", default: "bench-1b" },
    type: { type: "string", multiple: true, default: ["f16", "q4_0"] },
    models: { type: "string" },
    work: { type: "string" },
    tokens: { type: "string", default: "256" },
    cpu: { type: "boolean", default: false },
  },
});
const preset = values.preset as "bench-small" | "bench-1b";
if (values["llama-server"] === undefined || values.models === undefined || values.work === undefined || !["bench-small", "bench-1b"].includes(preset)) {
  console.error(
    "usage: check.ts --llama-server <path> --models <dir> --work <dir> [--preset bench-small|bench-1b] [--type f16 ...] [--binary <parley>] [--tokens N] [--cpu]",
  );
  process.exit(2);
}
const STREAMS = 8;
const TOKENS = Number(values.tokens);
const CONTEXT = 1024;
const TOP = 5;
/** Log-probabilities closer than this are a tie within llama.cpp's rounding (docs/performance.md). */
const NEAR_TIE = 1e-3;
const threads = navigator.hardwareConcurrency;
const messages = Array.from({ length: STREAMS }, (_, i) => userMessage(9000 + i, 50));

interface Spelled {
  token: string;
  logprob: number;
  bytes: number[];
}
interface Told extends Spelled {
  top_logprobs: Spelled[];
}
interface Completion {
  choices: { message: { content: string }; logprobs: { content: Told[] } | null }[];
  usage: { prompt_tokens: number };
}

/** A non-streamed chat completion with each token's log-probabilities. */
async function completion(url: string, message: string, maxTokens: number): Promise<Completion> {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: message }], temperature: 0, max_tokens: maxTokens, logprobs: true, top_logprobs: TOP }),
  });
  if (!response.ok) throw new Error(`${url}: ${response.status} ${await response.text()}`);
  return (await response.json()) as Completion;
}

async function on<T>(start: Promise<Server>, use: (server: Server) => Promise<T>): Promise<T> {
  const server = await start;
  try {
    return await use(server);
  } finally {
    await server.stop();
  }
}

/** Where `reply` first leaves `tokens`: the index of the first token it does not continue with, and that token's byte offset. */
function firstDifference(tokens: readonly Spelled[], reply: Uint8Array): { index: number; offset: number } | undefined {
  let offset = 0;
  for (const [index, token] of tokens.entries()) {
    if (!token.bytes.every((byte, i) => reply[offset + i] === byte)) return { index, offset };
    offset += token.bytes.length;
  }
  return offset === reply.length ? undefined : { index: tokens.length, offset };
}

const brief = ({ token, logprob }: Spelled) => ({ token, logprob });
const startsAt = (bytes: Uint8Array, offset: number, token: Spelled) => token.bytes.every((byte, k) => bytes[offset + k] === byte);
const logprobIn = (told: Told | undefined, token: string | undefined) => told?.top_logprobs.find((other) => other.token === token)?.logprob ?? null;

/**
 * A stream's first difference: llama-server's token there and Parley's (as llama-server spells its
 * candidates: the longest of its most likely that Parley's reply goes on with), each side's
 * log-probabilities of both, and the verdict. Parley's side is its one-step path's distribution,
 * asked afresh; it counts only where that reply came to the same place (the same bytes before it).
 */
function difference(tokens: readonly Told[], reply: Uint8Array, at: { index: number; offset: number }, oneStep: readonly Told[]) {
  const theirs = tokens[at.index]!;
  const mine = theirs.top_logprobs
    .filter((other) => other.token !== theirs.token && startsAt(reply, at.offset, other))
    .sort((a, b) => b.bytes.length - a.bytes.length)[0];
  const before = oneStep.slice(0, at.index).flatMap((token) => token.bytes);
  const step = before.length === at.offset && before.every((byte, k) => reply[k] === byte) ? oneStep[at.index] : undefined;
  const both = (told: Told | undefined) => ({ llamaServerToken: logprobIn(told, theirs.token), parleyToken: logprobIn(told, mine?.token) });
  const gap = ({ llamaServerToken, parleyToken }: ReturnType<typeof both>) =>
    llamaServerToken === null || parleyToken === null ? null : Math.abs(llamaServerToken - parleyToken);
  const gaps = { llamaServer: gap(both(theirs)), parleyOneStep: step === undefined ? null : gap(both(step)) };
  // How far the two sides' log-probabilities of the same tokens lie apart there: the rounding a gap is weighed against.
  const spread =
    step === undefined ? null : Math.max(...theirs.top_logprobs.map((other) => Math.abs(other.logprob - (logprobIn(step, other.token) ?? other.logprob))));
  return {
    index: at.index,
    llamaServer: { token: theirs.token, parleyToken: mine?.token ?? null, logprobs: both(theirs), top: theirs.top_logprobs.map(brief) },
    parley: { text: new TextDecoder().decode(reply.slice(at.offset, at.offset + 16)) },
    parleyOneStep: step === undefined ? null : { token: step.token, logprobs: both(step), top: step.top_logprobs.map(brief) },
    gaps,
    spread,
    verdict: Object.values(gaps).some((g) => g !== null && g <= NEAR_TIE) ? "near-tie" : "fault",
  };
}

async function check(fileType: string) {
  const type = presetFileType(preset, fileType);
  if (type === undefined) throw new Error(`--type: ${preset} is written as ${PRESET_FILE_TYPES[preset].join(", ")}`);
  // Absolute: the executable runs from a folder of its own.
  const model = resolve(values.models!, presetFileName(preset, preset, type));
  if (!(await Bun.file(model).exists())) await writePresetModel(preset, model, type);
  const label = `check-${fileType}`;
  // This file type's servers alone in its record, and a fresh database: a conversation left there would be history.
  launches.splice(0);
  rmSync(join(values.work!, label), { recursive: true, force: true });

  console.error(`${label}: llama-server, ${STREAMS} greedy replies of ${TOKENS} tokens with log-probabilities`);
  const reference = await on(
    startLlamaServer({
      binary: values["llama-server"]!,
      model,
      threads,
      parallel: STREAMS,
      contextSize: CONTEXT,
      flags: values.cpu ? [] : ["-ngl", "99"],
    }),
    (server) => Promise.all(messages.map((message) => completion(server.url, message, TOKENS))),
  );

  console.error(`${label}: Parley, the same through its native chat API, then its one-step distribution where a reply differs`);
  const installed = values.binary === undefined ? undefined : installAlone(values.binary, label);
  const parley = startParley({
    model,
    db: join(values.work!, label, "parley.db"),
    threads,
    parallel: STREAMS,
    contextSize: CONTEXT,
    installed,
    env: {
      PARLEY_GPU: values.cpu ? "false" : "cuda",
      PARLEY_SPECULATE: "off",
      // Where run.sh unpacked the natives and put the CUDA build beside them.
      ...(Bun.env.PARLEY_NATIVES_DIR ? { PARLEY_NATIVES_DIR: Bun.env.PARLEY_NATIVES_DIR } : {}),
    },
  });
  const streams = await on(parley, async (server) => {
    const replies = await Promise.all(messages.map((message, i) => parleyTurn(server.url, `${label}-${i}`, message, TOKENS)));
    return Promise.all(
      replies.map(async (reply, i) => {
        const tokens = reference[i]!.choices[0]!.logprobs!.content;
        const bytes = new TextEncoder().encode(reply.reply);
        const at = firstDifference(tokens, bytes);
        const base = {
          stream: i,
          promptTokens: { parley: reply.promptTokens, llamaServer: reference[i]!.usage.prompt_tokens },
          tokens: [reply.completionTokens, tokens.length],
        };
        if (at === undefined) return { ...base, firstDifference: null };
        // All of one side's reply: the other stopped there.
        if (at.index === tokens.length || at.offset === bytes.length)
          return { ...base, firstDifference: { index: at.index, stopped: at.index === tokens.length ? "llamaServer" : "parley" } };
        const oneStep = (await completion(server.url, messages[i]!, at.index + 1)).choices[0]!.logprobs!.content;
        return { ...base, firstDifference: difference(tokens, bytes, at, oneStep) };
      }),
    );
  });
  if (installed) rmSync(installed.dir, { recursive: true, force: true });

  const differing = streams.filter((s) => s.firstDifference !== null);
  const samePrompts = streams.every((s) => s.promptTokens.parley === s.promptTokens.llamaServer);
  const verdicts = differing.map((s) => (s.firstDifference as { verdict?: string }).verdict ?? "fault");
  return {
    fileType: type,
    model: presetFileName(preset, preset, type),
    device: values.cpu ? "cpu" : "cuda",
    streams: STREAMS,
    tokensAsked: TOKENS,
    samePrompts,
    equalStreams: STREAMS - differing.length,
    // Tokens both sides gave alike before each stream's first difference (or to its end).
    tokensAgreed: streams.reduce((sum, s) => sum + (s.firstDifference === null ? s.tokens[1]! : (s.firstDifference as { index: number }).index), 0),
    verdict: !samePrompts || verdicts.includes("fault") ? "fault" : verdicts.length > 0 ? "near-tie" : "equal",
    streamsDetail: streams,
    provenance: await provenance({
      model,
      llamaServer: values["llama-server"],
      binary: values.binary,
      nativesDir: Bun.env.PARLEY_NATIVES_DIR,
      localCompiled: values.binary === undefined ? join(compiledNativesDir(NODE_LLAMA_CPP_VERSION), "linux-x64") : undefined,
    }),
  };
}

for (const fileType of values.type!) console.log(JSON.stringify(await check(fileType)));
