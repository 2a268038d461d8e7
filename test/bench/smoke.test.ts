import { expect, test } from "bun:test";
import { join } from "node:path";

// The quick variant: demo model, one run, no llama-server build. It checks the harness works end
// to end (servers start, every scenario reports, a table and a JSON file come out), not speed.
test("bun run bench perf --quick prints every benchmark", async () => {
  const proc = Bun.spawn(["bun", "run", "bench", "perf", "--quick"], {
    cwd: join(import.meta.dir, "../.."),
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  expect(code, err).toBe(0);
  for (const id of ["B1", "B2", "B3", "B4", "B5", "B6", "B7"]) expect(out).toContain(`| ${id} `);
  expect(out).toMatch(/written \.bench\/perf-.*\.json/);
}, 60_000);
