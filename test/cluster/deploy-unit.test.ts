/**
 * The shipped systemd unit, parsed as systemd reads it: a node whose database is late is started
 * again rather than left failed, and a node's own port and data directory cannot be overridden by
 * the shared environment file (systemd lets EnvironmentFile= win over Environment=, and a flag
 * wins over both in Parley).
 */
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgv } from "../../src/config";
import { parseUnit } from "../support";

const unit = parseUnit(readFileSync(join(import.meta.dir, "../../deploy/parley@.service"), "utf8"));
const value = (section: string, key: string) => unit.get(section)?.get(key);

test("a node whose database is late is started again, after a pause, without a start limit", () => {
  expect(value("Service", "Restart")).toEqual(["on-failure"]);
  expect(Number(value("Service", "RestartSec")?.[0])).toBeGreaterThanOrEqual(1);
  expect(value("Unit", "StartLimitIntervalSec")).toEqual(["0"]);
  expect(value("Unit", "After")?.join(" ")).toContain("postgresql.service");
});

test("the node's own port and data directory are flags, which the shared environment file cannot override", () => {
  const [execStart] = value("Service", "ExecStart")!;
  const { flags, positionals } = parseArgv(execStart!.split(/\s+/).slice(1));
  expect(positionals).toEqual(["serve"]);
  expect(flags.get("--port")).toBe("%i");
  expect(flags.get("--data-dir")).toBe("/var/lib/parley/node-%i");
  expect(flags.get("--host")).toBe("0.0.0.0");
  const environment = (value("Service", "Environment") ?? []).join(" ");
  for (const name of ["PARLEY_PORT", "PARLEY_DATA_DIR", "PARLEY_HOST"]) expect(environment).not.toContain(name);
  expect(value("Service", "EnvironmentFile")).toEqual(["/etc/parley/parley.env"]);
});
