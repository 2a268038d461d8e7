import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { findElements, parseXml } from "../support";

const ROOT = join(import.meta.dir, "../..");

// The quick variant: demo model, one run, no llama-server build. It checks the harness works end
// to end (servers start, every scenario reports, a table, a JSON file and a chart come out), not
// speed. Its ceiling is no timing: over ten times what the run takes on two idle cores.
test("bun run bench perf --quick prints every benchmark and draws the chart", async () => {
  const proc = Bun.spawn(["bun", "run", "bench", "perf", "--quick"], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  expect(code, err).toBe(0);
  for (const id of ["B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9"]) expect(out).toContain(`| ${id} `);
  expect(out).toMatch(/written \.bench\/perf-.*\.json/);

  const chart = /written (\.bench\/perf-.*\.svg)/.exec(out)?.[1];
  expect(chart, out).toBeDefined();
  const svg = parseXml(readFileSync(join(ROOT, chart!), "utf8"));
  const parley = (panel: string, element: string) =>
    findElements(findElements(svg, (e) => e.attributes.id === panel)[0]!, (e) => e.name === element && e.attributes["data-series"] === "parley");
  expect(parley("throughput", "rect")).toHaveLength(4); // 1, 2, 4 and 8 streams
  expect(parley("ttft-per-turn", "polyline")[0]!.attributes.points!.split(" ")).toHaveLength(3); // --quick's turns
  expect(parley("ttft-while-busy", "rect")).toHaveLength(2);
  expect(parley("repeating-replies", "rect")).toHaveLength(3); // 1, 4 and 8 streams
  expect(parley("service-day", "rect")).toHaveLength(5); // p10, p50, p90, p95 and the longest
}, 300_000);
