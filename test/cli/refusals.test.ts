import { describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { allowSlowTests, presetModel, tempDir } from "../support";

allowSlowTests();

const model = await presetModel("demo");

const run = (args: string[], env: Record<string, string>) => {
  const result = Bun.spawnSync(["bun", "src/cli.ts", ...args], {
    cwd: join(import.meta.dir, "../.."),
    // A models directory of its own: the checkout's may hold a developer's models.
    env: { ...Bun.env, PARLEY_PORT: "0", PARLEY_MODEL: model, PARLEY_MODELS_DIR: tempDir("refusals-models"), ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  return { code: result.exitCode, stdout: result.stdout.toString(), stderr: result.stderr.toString().trim() };
};

describe("start-up refusals are one line naming the setting, exit 2", () => {
  const dir = tempDir("refusals");
  const directory = join(dir, "a-directory");
  mkdirSync(directory);
  const db = join(dir, "ok", "parley.db");
  const cases: [string, string[], Record<string, string>, RegExp][] = [
    [
      "PARLEY_DB is a directory (serve)",
      ["serve"],
      { PARLEY_DB: directory },
      /^parley: PARLEY_DB \(--db\) is ".*a-directory", which cannot be opened: it is a directory/,
    ],
    ["PARLEY_DB is a directory (keys)", ["keys", "list"], { PARLEY_DB: directory }, /^parley: PARLEY_DB \(--db\) is ".*a-directory", which cannot be opened/],
    [
      "PARLEY_DB cannot be created",
      ["serve"],
      { PARLEY_DB: "/proc/parley/parley.db" },
      /^parley: PARLEY_DB \(--db\) is "\/proc\/parley\/parley.db", which cannot be opened/,
    ],
    [
      "PARLEY_MODEL is missing",
      ["serve"],
      { PARLEY_DB: db, PARLEY_MODEL: join(dir, "missing.gguf") },
      /^parley: PARLEY_MODEL \(--model\) is ".*missing.gguf", which is not a readable file$/,
    ],
    [
      "PARLEY_DATA_DIR cannot be created",
      ["serve"],
      { PARLEY_DB: db, PARLEY_DATA_DIR: "/proc/parley-data" },
      /^parley: PARLEY_DATA_DIR \(--data-dir\) is "\/proc\/parley-data", which cannot be created/,
    ],
  ];
  for (const [name, args, env, line] of cases) {
    test(name, () => {
      const result = run(args, env);
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr.split("\n")).toHaveLength(1);
      expect(result.stderr).toMatch(line);
      expect(result.stdout).not.toContain('"msg":"listening"');
    });
  }

  test("a start refused for its model has not created (or shown) the first admin key", () => {
    const fresh = join(tempDir("refusals-fresh"), "parley.db");
    const result = run(["serve"], { PARLEY_DB: fresh, PARLEY_MODEL: join(dir, "missing.gguf") });
    expect(result.code).toBe(2);
    expect(result.stdout).not.toContain("First start");
  });
});
