/**
 * `bun run bench fuzz [--cases N] [--seed S]`: the long run of test/load/protocol-fuzz.test.ts,
 * N random and adversarial bodies per route (default 2000) where CI sends a few hundred. Not a
 * timing: it is here because it takes minutes, as the benchmarks do. Exits with the test's code;
 * the test prints the seed (`--seed`, or PARLEY_TEST_SEED, replays a run).
 */
import { join } from "node:path";
import { parseArgs } from "node:util";

const { values } = parseArgs({ args: Bun.argv.slice(2), options: { cases: { type: "string", default: "2000" }, seed: { type: "string" } } });
const cases = Number(values.cases);
if (!Number.isInteger(cases) || cases < 1) throw new Error("--cases must be a positive integer");

// A few hundred milliseconds a case at most, plus fast-check's shrinking of a failing one.
const timeoutMs = cases * 1_000 + 600_000;
const test = join(import.meta.dir, "..", "test", "load", "protocol-fuzz.test.ts");
// The load tier is left out of a plain `bun test` (bunfig.toml): named here, it is let in.
const proc = Bun.spawn(["bun", "test", "--path-ignore-patterns=node_modules/**", "--timeout", String(timeoutMs), test], {
  cwd: join(import.meta.dir, ".."),
  env: { ...Bun.env, PARLEY_FUZZ_CASES: String(cases), ...(values.seed ? { PARLEY_TEST_SEED: values.seed } : {}) },
  stdio: ["inherit", "inherit", "inherit"],
});
process.exit(await proc.exited);
