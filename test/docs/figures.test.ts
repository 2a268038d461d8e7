/**
 * Every measured figure the README and docs/ quote cites the committed result file behind it, and
 * no document holds a path of one machine (issue #64). What counts as a figure, a citation and a
 * machine path is written down in test/support/doc-figures.ts.
 */
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { machinePaths, unsourced } from "../support/doc-figures";

const ROOT = join(import.meta.dir, "../..");
const RESULTS = readdirSync(join(ROOT, "bench/results"));
const read = (path: string) => readFileSync(join(ROOT, path), "utf8");
const DOCS = readdirSync(join(ROOT, "docs"))
  .filter((name) => name.endsWith(".md"))
  .map((name) => `docs/${name}`);

describe("the detector", () => {
  const results = ["2026-11-27T22-39-perf-B1-B8-gpu-h100-f16-7eb1acb.json", "2026-11-26T10-04-43-perf-B14.json"];

  test("flags a figure without a citation, and passes it with one", () => {
    expect(unsourced("One stream decoded 562 tok/s against 560.", results)).toHaveLength(1);
    expect(unsourced("Parley read 1.39× llama-server's rate.", results)).toHaveLength(1);
    expect(unsourced("A turn took 147 ms.", results)).toHaveLength(1);
    expect(unsourced("One stream 0.97 of llama-server's rate.", results)).toHaveLength(1);
    expect(unsourced("One stream decoded 562 tok/s (`bench/results/2026-11-26T10-04-43-perf-B14.json`).", results)).toEqual([]);
    expect(unsourced("562 ÷ 560 = 1.00 (`*-gpu-h100-*-7eb1acb.json`).", results)).toEqual([]);
  });

  test("a table is one block with the paragraph above it", () => {
    const table = "| measure | value |\n|---|---|\n| decode | 562 tok/s |";
    expect(unsourced(`On the GPU:\n\n${table}`, results)).toHaveLength(1);
    expect(unsourced(`On the GPU (\`bench/results/*-perf-B14.json\`):\n\n${table}`, results)).toEqual([]);
    const memory = "| | Parley | llama-server |\n|---|---|---|\n| idle | 454 (209 + 245) | 351 |";
    expect(unsourced(`Resident memory, in MiB:\n\n${memory}`, results)).toHaveLength(1);
    expect(unsourced(`| status | when |\n|---|---|\n| 413 | over 32 MiB |`, results)).toEqual([]);
  });

  test("a citation must name a result file that is there", () => {
    expect(unsourced("Decoded 562 tok/s (`bench/results/2026-01-01-perf-B1.json`).", results)).toHaveLength(1);
    expect(unsourced("Decoded 562 tok/s (`*-perf-B99-*.json`).", results)).toHaveLength(1);
  });

  test("limits, defaults and sizes of settings are not figures", () => {
    for (const text of [
      "At most 16 pictures of 4096×4096, a prompt of 4096 tokens, on port 8080.",
      "`PARLEY_BODY_LIMIT` raised to 4 MiB so that the retrieval limits bind.",
      "The body did not arrive within 10 s; heartbeats every 10 s.",
      "The demo model is 4.8 MB; bench-small in F16 is 195 MB.",
      "Target ≥ 0.95 of llama-server's rate; version 3.22.1 of node-llama-cpp.",
    ])
      expect(unsourced(text, results)).toEqual([]);
  });

  test("flags a machine's path, not a system's", () => {
    expect(machinePaths("Written to /work/main/.bench/perf.json and /tmp/parley-x/out.json.")).toHaveLength(2);
    expect(machinePaths("See /home/user/notes and ../shared/notes/stack-facts.md.")).toHaveLength(2);
    expect(machinePaths("In /etc/parley, /var/lib/parley, /usr/local/cuda, /dev/shm and `/tmp`; [ops](../docs/operations.md).")).toEqual([]);
  });
});

describe("the documents", () => {
  test.each(["README.md", "CONTRIBUTING.md", ...DOCS])("%s holds no machine path", (path) => {
    expect(machinePaths(read(path))).toEqual([]);
  });

  test.each(["README.md", ...DOCS])("every measured figure of %s cites its result file", (path) => {
    expect(unsourced(read(path), RESULTS)).toEqual([]);
  });
});
