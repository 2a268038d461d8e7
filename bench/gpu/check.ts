/**
 * `check.js --binary <parley> --model <f16.gguf> [--cpu]`, the GPU run's correctness check
 * (bench/gpu/run.sh): the same prompt at temperature 0 on Parley with `PARLEY_GPU=cuda` and on
 * the CPU alone, the first 64 tokens of each reply compared (as their texts and bytes, through
 * OpenAI's log-probabilities). GPU kernels may order their sums otherwise than the CPU's, which on
 * a near-tie picks another token: the first difference, if any, is reported with both tokens'
 * log-probabilities, so a tie is told from a fault. With `--cpu` (the rehearsal) both sides are the
 * CPU, which must agree exactly. Prints one JSON object.
 */
import { parseArgs } from "node:util";
import { installAlone } from "../../test/support/binary";
import { ADMIN_KEY, startParley } from "../perf/procs";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: { binary: { type: "string" }, model: { type: "string" }, work: { type: "string" }, cpu: { type: "boolean", default: false } },
});
if (values.binary === undefined || values.model === undefined || values.work === undefined) {
  console.error("usage: check.js --binary <parley> --model <f16.gguf> --work <dir> [--cpu]");
  process.exit(2);
}
const TOKENS = 64;
const PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle.";

interface Token {
  token: string;
  logprob: number;
  bytes: number[];
}

async function reply(gpu: boolean, label: string): Promise<{ tokens: Token[]; device: string }> {
  const installed = installAlone(values.binary!, `check-${label}`);
  const server = await startParley({
    model: values.model!,
    db: `${values.work}/check-${label}/parley.db`,
    threads: navigator.hardwareConcurrency,
    parallel: 1,
    contextSize: 1024,
    installed,
    // Where run.sh unpacked the natives and put the CUDA build beside them.
    env: {
      PARLEY_GPU: gpu ? "cuda" : "false",
      PARLEY_SPECULATE: "off",
      ...(Bun.env.PARLEY_NATIVES_DIR ? { PARLEY_NATIVES_DIR: Bun.env.PARLEY_NATIVES_DIR } : {}),
    },
  });
  try {
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "user", content: PROMPT }], temperature: 0, max_tokens: TOKENS, logprobs: true }),
    });
    if (!response.ok) throw new Error(`${label}: ${response.status} ${await response.text()}`);
    const body = (await response.json()) as { choices: { logprobs: { content: Token[] } }[] };
    return { tokens: body.choices[0]!.logprobs.content, device: gpu ? "cuda" : "cpu" };
  } finally {
    await server.stop();
  }
}

const first = await reply(!values.cpu, values.cpu ? "cpu-a" : "gpu");
const second = await reply(false, values.cpu ? "cpu-b" : "cpu");
const same = (a: Token, b: Token) => a.token === b.token && a.bytes.join() === b.bytes.join();
const length = Math.min(first.tokens.length, second.tokens.length);
const differs = Array.from({ length }, (_, i) => i).find((i) => !same(first.tokens[i]!, second.tokens[i]!));
const at = (tokens: Token[], i: number) => ({ token: tokens[i]!.token, logprob: tokens[i]!.logprob });
console.log(
  JSON.stringify({
    tokens: [first.tokens.length, second.tokens.length],
    equal: differs === undefined && first.tokens.length === second.tokens.length,
    firstDifference: differs === undefined ? null : { index: differs, [first.device]: at(first.tokens, differs), cpu: at(second.tokens, differs) },
    // How close the logits ran where the two agreed: a difference of this order is a near-tie.
    maxLogprobGap: Math.max(0, ...Array.from({ length: differs ?? length }, (_, i) => Math.abs(first.tokens[i]!.logprob - second.tokens[i]!.logprob))),
  }),
);
