/** Preloaded by bunfig.toml: its `afterAll` runs once, after the run's last test file. */
import { afterAll } from "bun:test";
import { endRun } from "./end-of-run";

afterAll(endRun);
