import { describe, expect, test } from "bun:test";
import { statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DEMO_FINGERPRINT_KEY, demoFingerprint } from "../../src/gguf/demo";
import { readGgufHeader } from "../../src/gguf/reader";
import { resolveModel } from "../../src/llm/model";
import { tempDir } from "../support";

describe("the built-in demo model on start-up", () => {
  test("is written once, stamped with its fingerprint, and reused while it matches", async () => {
    const dir = tempDir("demo-reuse");
    const first = await resolveModel({ modelsDir: dir });
    expect(first).toEqual({ path: join(dir, "parley-demo.gguf"), demo: true });
    expect(readGgufHeader(first.path).metadata[DEMO_FINGERPRINT_KEY]).toEqual({ type: "string", value: demoFingerprint() });

    // Dated back, so that a rewrite, even within the same millisecond, would show in the time.
    const past = new Date("2020-01-01T00:00:00Z");
    utimesSync(first.path, past, past);
    const written = statSync(first.path);
    await resolveModel({ modelsDir: dir });
    const again = statSync(first.path);
    expect([again.ino, again.mtimeMs]).toEqual([written.ino, written.mtimeMs]);
  });

  test("a damaged or foreign file under the demo's name is replaced", async () => {
    const dir = tempDir("demo-replace");
    const path = join(dir, "parley-demo.gguf");
    writeFileSync(path, "GGUF but not really");
    const resolved = await resolveModel({ modelsDir: dir });
    expect(resolved.demo).toBe(true);
    expect(readGgufHeader(path).metadata[DEMO_FINGERPRINT_KEY]).toEqual({ type: "string", value: demoFingerprint() });
  });
});
