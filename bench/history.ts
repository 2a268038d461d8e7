/**
 * `bun run bench history`: every recorded run's ratios to llama-server, a table a measure, from the data
 * under bench/results/: runs 1-32 as kept by hand then (`history-runs-1-32.json`), and each
 * `bench perf` JSON saved there since (a run's targets: B1, B3, B8 at 1 and 4 streams, B9, B14;
 * B15 is Parley against itself without a quota; B8 at 8 and 32 streams is the GPU run's, whose
 * files are named `-gpu-`).
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const RESULTS = join(import.meta.dir, "results");

/** The measures a column may have, by the names both kinds of file use. */
const MEASURES: { label: string; history: string; perf: [id: string, what: string] }[] = [
  { label: "B1, 1 stream over HTTP", history: "B1 decode tok/s, 1 stream over HTTP", perf: ["B1", "decode tok/s, streamed over HTTP"] },
  { label: "B8, 1 stream", history: "B8 aggregate decode tok/s, 1 stream", perf: ["B8", "aggregate decode tok/s, 1 stream"] },
  { label: "B8, 4 streams", history: "B8 aggregate decode tok/s, 4 streams", perf: ["B8", "aggregate decode tok/s, 4 streams"] },
  { label: "B8, 8 streams", history: "-", perf: ["B8", "aggregate decode tok/s, 8 streams"] },
  { label: "B8, 32 streams", history: "-", perf: ["B8", "aggregate decode tok/s, 32 streams"] },
  { label: "B9 (≤ 1 is met)", history: "B9 short request TTFT busy ÷ alone", perf: ["B9", "short request TTFT while 3 decode ÷ alone (parallel 4)"] },
  { label: "B3 (≤ 1 is met)", history: "B3 sum of TTFT over 20 turns", perf: ["B3", "sum of TTFT ms over 20 turns"] },
  { label: "B10 median (≤ 1.5 is met)", history: "-", perf: ["B10", "TTFT past a 1024-token context ÷ the 8 turns before, median"] },
  { label: "B10 p95 (≤ 1.5 is met)", history: "-", perf: ["B10", "TTFT past a 1024-token context ÷ the 8 turns before, p95"] },
  { label: "B11 (≤ 0.7 is met)", history: "-", perf: ["B11", "Σ TTFT ms, 16 conversations × 8 turns, interleaved, 4 at a time on 4 sequences"] },
  { label: "B12 (≤ 0.3 is met)", history: "-", perf: ["B12", "Σ TTFT ms of the next turn of 8 conversations after both servers restarted (after turn 4)"] },
  { label: "B13 (≤ 1.3 is met)", history: "-", perf: ["B13", "Σ first-turn TTFT of 8 new conversations, a 1000-token system prompt ÷ none"] },
  { label: "B14, JSON schema", history: "B14 decode tok/s, a reply held to a JSON schema", perf: ["B14", "decode tok/s, a reply held to a JSON schema"] },
  { label: "B15, a quota ÷ none (≤ 1.05 is met)", history: "-", perf: ["B15", "Σ turn ms to done of 12 turns (8 reply tokens), a quota ÷ none"] },
  { label: "B17, repeating replies vs default", history: "-", perf: ["B17", "repeating replies, decode tok/s, 1 stream vs llama-server's default"] },
  { label: "B17, vs --spec-type ngram-mod", history: "-", perf: ["B17", "repeating replies, decode tok/s, 1 stream vs llama-server --spec-type ngram-mod"] },
  {
    label: "B17, vs llama-server's best speculation setting",
    history: "-",
    perf: ["B17", "repeating replies, decode tok/s, 1 stream vs llama-server's best speculation setting"],
  },
  {
    label: "B18, 4 streams vs default",
    history: "-",
    perf: ["B18", "repeating replies, tok/s from the requests' sending, 4 streams vs llama-server's default"],
  },
  {
    label: "B18, 8 streams vs default",
    history: "-",
    perf: ["B18", "repeating replies, tok/s from the requests' sending, 8 streams vs llama-server's default"],
  },
  {
    label: "B19 Σ TTFT (≤ 0.7 is met)",
    history: "-",
    perf: ["B19", "Σ TTFT ms, 64 conversations × 4 turns on 4 sequences, arriving 400 ms apart on average, replies of 16–64 tokens"],
  },
  { label: "B19 p95 TTFT (≤ 0.8 is met)", history: "-", perf: ["B19", "p95 TTFT ms, the same"] },
  { label: "B20, q8_0 KV ÷ f16 per sequence (≤ 0.55 is met)", history: "-", perf: ["B20", "MiB a sequence adds (4096 tokens), q8_0 ÷ f16"] },
  { label: "B20, q8_0 decode, 4 streams", history: "-", perf: ["B20", "aggregate decode tok/s in q8_0, 4 streams"] },
  { label: "B21, embeddings inputs/s", history: "-", perf: ["B21", "embeddings inputs/s, 64 inputs of ~100 tokens a request"] },
  { label: "B22, rerank (llama-server's ms ÷ Parley's)", history: "-", perf: ["B22", "rerank ms, 16 documents a query (ratio: llama-server's ÷ Parley's)"] },
  { label: "B23, TTFT with a new picture", history: "-", perf: ["B23", "TTFT ms, a chat completion with a new 256×256 picture"] },
  { label: "B24, a picture's ms", history: "-", perf: ["B24", "a picture's ms: TTFT with it − without (decode, encode, evaluate)"] },
  ...[1, 4, 8].map((n) => ({
    label: `B25, fresh text, speculation auto ÷ off, ${n} stream${n === 1 ? "" : "s"} (≥ 0.98 is met)`,
    history: "-",
    perf: ["B25", `fresh text, aggregate decode tok/s, ${n} stream${n === 1 ? "" : "s"}, speculation auto ÷ off`] as [string, string],
  })),
];

interface Cell {
  ratio: number;
  interval?: { lo: number; hi: number; min: number; max: number; pairs: number };
}

interface Run {
  name: string;
  workload?: string;
  invalid?: string;
  cells: (Cell | null)[];
}

interface History {
  runs: number[];
  ratios: Record<string, (number | null)[]>;
}

interface PerfRun {
  when: string;
  workload?: string;
  invalid?: string;
  rows: { id: string; what: string; ratio: number | null; interval?: Cell["interval"] }[];
}

const history = JSON.parse(readFileSync(join(RESULTS, "history-runs-1-32.json"), "utf8")) as History;
const runs: Run[] = history.runs.map((run, i) => ({
  name: String(run),
  cells: MEASURES.map((m) => {
    const ratio = history.ratios[m.history]?.[i];
    return ratio == null ? null : { ratio };
  }),
}));
for (const file of readdirSync(RESULTS)
  .filter((name) => name.includes("-perf-"))
  .sort()) {
  const run = JSON.parse(readFileSync(join(RESULTS, file), "utf8")) as PerfRun;
  const cell = ([id, what]: [string, string]): Cell | null => {
    const row = run.rows.find((r) => r.id === id && r.what === what);
    return row?.ratio == null ? null : { ratio: row.ratio, ...(row.interval ? { interval: row.interval } : {}) };
  };
  runs.push({
    name: file.replace(/\.json$/, ""),
    ...(run.workload ? { workload: run.workload } : {}),
    ...(run.invalid ? { invalid: run.invalid } : {}),
    cells: MEASURES.map((m) => cell(m.perf)),
  });
}

// One table a measure, a line a run that has it: the ratio with its paired rounds' spread where the
// run kept them, and a run marked invalid (a failed or empty round) shown but never read as a figure.
const fixed = (value: number) => value.toFixed(2);
for (const [i, measure] of MEASURES.entries()) {
  const lines = runs.flatMap((run) => {
    const cell = run.cells[i];
    if (!cell) return [];
    const spread = cell.interval ? `${fixed(cell.interval.lo)}–${fixed(cell.interval.hi)}` : "unpaired";
    const range = cell.interval ? `${fixed(cell.interval.min)}–${fixed(cell.interval.max)} (${cell.interval.pairs})` : "—";
    const ratio = run.invalid ? `invalid (${fixed(cell.ratio)})` : fixed(cell.ratio);
    return [`| ${run.name} | ${run.workload ?? "—"} | ${ratio} | ${spread} | ${range} |`];
  });
  if (lines.length === 0) continue;
  console.log(`\n### ${measure.label}\n`);
  console.log("| run | workload | ratio (median of pairs) | 95% interval | min–max (pairs) |");
  console.log("|---|---|---|---|---|");
  for (const line of lines) console.log(line);
}
