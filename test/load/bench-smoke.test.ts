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
  for (const id of ["B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9", "B25"]) expect(out).toContain(`| ${id} `);
  const json = /written (\.bench\/perf-.*\.json)/.exec(out)?.[1];
  expect(json, out).toBeDefined();

  // The file says where its figures came from, in paths of the checkout only, and pairs its rounds.
  const text = readFileSync(join(ROOT, json!), "utf8");
  expect(text).not.toContain(ROOT);
  const report = JSON.parse(text);
  expect(report.invalid).toBeUndefined();
  expect(report.workload).toBe("kernel-parity");
  expect(report.provenance.parley.commit).toMatch(/^[0-9a-f]{40}$/);
  expect(report.provenance.llamaCpp.commit).toMatch(/^[0-9a-f]{40}$/);
  expect(report.provenance.model.sha256).toMatch(/^[0-9a-f]{64}$/);
  expect(report.provenance.machine.cores).toBe(navigator.hardwareConcurrency);
  expect(report.provenance.servers.some((s: { env?: Record<string, string> }) => s.env?.PARLEY_SPECULATE === "off")).toBe(true);
  const b25 = report.rows.filter((row: { id: string }) => row.id === "B25");
  expect(b25).toHaveLength(3);
  for (const row of b25) expect(row.interval.pairs).toBe(1);

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
