import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { CONFIG_DOC, configurationDoc } from "../../tools/config-doc";

test("docs/configuration.md is what CONFIG_SPEC renders (`bun run docs` writes it)", () => {
  expect(readFileSync(CONFIG_DOC, "utf8")).toBe(configurationDoc());
});
