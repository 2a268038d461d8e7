import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { ConfigError, loadConfig } from "../../src/config";
import { tempDir } from "../support";

describe("PARLEY_DATA_DIR", () => {
  test("defaults to the database file's directory; the flag wins over the variable", () => {
    expect(loadConfig({ PARLEY_DB: "/srv/parley/db/parley.db" }).dataDir).toBe("/srv/parley/db");
    expect(loadConfig({ PARLEY_DB: "/srv/db/parley.db", PARLEY_DATA_DIR: "/srv/state" }).dataDir).toBe("/srv/state");
    expect(loadConfig({ PARLEY_DATA_DIR: "/srv/state" }, new Map([["--data-dir", "/srv/other"]])).dataDir).toBe("/srv/other");
  });

  test("a file or a blank value stops start-up with a message naming the setting", async () => {
    const file = join(tempDir("config"), "a-file");
    await Bun.write(file, "");
    expect(() => loadConfig({ PARLEY_DATA_DIR: file })).toThrow(new ConfigError(`PARLEY_DATA_DIR must name a directory, existing or to be created (got "${file}")`));
    expect(() => loadConfig({}, new Map([["--data-dir", " "]]))).toThrow(/^--data-dir must name a directory/);
  });
});
