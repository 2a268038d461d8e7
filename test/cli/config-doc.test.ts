import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { CONFIG_SPEC } from "../../src/config";
import { CONFIG_DOC, configurationDoc } from "../../tools/config-doc";
import { allowSlowTests } from "../support";

allowSlowTests();

test("docs/configuration.md is what CONFIG_SPEC renders (`bun run docs` writes it)", () => {
  expect(readFileSync(CONFIG_DOC, "utf8")).toBe(configurationDoc());
});

test("`parley --help` lists every setting with its flag and variable apart from its help", () => {
  const result = Bun.spawnSync(["bun", "src/cli.ts", "--help"], { cwd: join(import.meta.dir, "../..") });
  expect(result.exitCode).toBe(0);
  const lines = result.stdout.toString().split("\n");
  for (const spec of Object.values(CONFIG_SPEC)) {
    const line = lines.find((candidate) => candidate.includes(`${spec.flag} / ${spec.env} `));
    expect(line, spec.env).toBeDefined();
    expect(line).toMatch(new RegExp(`${spec.env} {2,}\\S`));
    // The default is said once, by the listing, never again by the help text.
    expect(line!.match(/\bdefault [^)\s]+\)/g)?.length ?? 0, spec.env).toBeLessThanOrEqual(1);
  }
});
