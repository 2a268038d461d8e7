/**
 * `bun run bench attention [--type f16|q4_0] [--runs N] [--threads N]`: flash attention on and off,
 * in the engine itself (no HTTP), on bench-small: prompt evaluation of a long prompt, and decode
 * speed after a short and after a long prompt. PARLEY_FLASH_ATTENTION's `auto` is chosen from this.
 * Writes `.bench/attention-<time>.json`.
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { presetFileName, presetFileType, writePresetModel } from "../src/gguf/presets";
import { Engine } from "../src/llm/engine";
import { median } from "../test/support/stats";

const OUT = join(import.meta.dir, "..", ".bench");
const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: { type: { type: "string" }, runs: { type: "string", default: "3" }, threads: { type: "string" } },
});
const fileType = presetFileType("bench-small", values.type);
if (fileType === undefined) throw new Error("--type: f16, q8_0 or q4_0");
const model = join(OUT, presetFileName("bench-small", "bench-small", fileType));
mkdirSync(OUT, { recursive: true });
if (!existsSync(model)) await writePresetModel("bench-small", model, fileType);
const runs = Number(values.runs);
const threads = Number(values.threads ?? navigator.hardwareConcurrency);
const DECODE_TOKENS = 128;
/** Words that tokenize to about 3,000 tokens of bench-small's vocabulary: most of a 4,096 context. */
const LONG = Array.from({ length: 780 }, (_, i) => `w${i}`).join(" ");

interface Measured {
  promptTokens: number;
  /** Prompt tokens evaluated per second (until the first token). */
  promptTps: number;
  /** Tokens generated per second after the first. */
  decodeTps: number;
}

async function turn(engine: Engine, key: string, message: string): Promise<Measured> {
  const started = performance.now();
  let first = 0;
  const generation = engine.generate({
    conversationKey: key,
    cacheScope: "bench",
    history: [{ role: "user", content: message }],
    temperature: 0,
    maxTokens: DECODE_TOKENS,
  });
  for (;;) {
    const step = await generation.next();
    if (step.done) {
      const ended = performance.now();
      const { promptTokens, completionTokens } = step.value;
      return { promptTokens, promptTps: (promptTokens * 1000) / (first - started), decodeTps: ((completionTokens - 1) * 1000) / (ended - first) };
    }
    if (first === 0) first = performance.now();
  }
}

const rows: Record<string, unknown>[] = [];
for (const flash of ["off", "on"] as const) {
  const engine = await Engine.load({ modelPath: model, parallel: 1, threads, contextSize: 4096, flashAttention: flash, kvCache: undefined });
  try {
    await turn(engine, "warm-up", "hello");
    for (const [name, message] of [
      ["short", "Tell me about the sea"],
      ["long", LONG],
    ] as const) {
      const measured: Measured[] = [];
      // A different first word each run: the sequence still holds the last run's prompt, which would be reused.
      for (let r = 0; r < runs; r++) measured.push(await turn(engine, `${name}-${r}`, `r${r} ${message}`));
      const row = {
        flashAttention: flash,
        prompt: name,
        promptTokens: measured[0]!.promptTokens,
        promptTps: median(measured.map((m) => m.promptTps)),
        decodeTps: median(measured.map((m) => m.decodeTps)),
      };
      rows.push(row);
      console.error(JSON.stringify(row));
    }
  } finally {
    await engine.close();
  }
}

const report = { when: new Date().toISOString(), command: `bun run bench attention ${Bun.argv.slice(2).join(" ")}`.trim(), model, threads, runs, rows };
const file = join(OUT, `attention-${report.when.replace(/[:.]/g, "-")}.json`);
writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
console.log("flash attention   prompt   prompt tokens   prompt tok/s   decode tok/s");
for (const row of rows) {
  console.log(
    `${String(row.flashAttention).padEnd(18)}${String(row.prompt).padEnd(9)}${String(row.promptTokens).padStart(13)}${(row.promptTps as number).toFixed(1).padStart(15)}${(row.decodeTps as number).toFixed(1).padStart(15)}`,
  );
}
console.log(`written ${file}`);
