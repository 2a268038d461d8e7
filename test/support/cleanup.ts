/** Preloaded by bunfig.toml: its `afterAll` runs once, after the run's last test file. */
import { afterAll } from "bun:test";
import { endRun } from "./end-of-run";

// A server a test starts never builds the natives behind it (PARLEY_BUILD_NATIVES, inherited by
// every child): the build would write to the user's natives cache and outlive a server the test
// kills. test/cli/start.test.ts asks for a stand-in build by name.
Bun.env.PARLEY_BUILD_NATIVES ??= "off";

afterAll(endRun);
