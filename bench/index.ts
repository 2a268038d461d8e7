/**
 * `bun run bench <name> [args]` runs `bench/<name>.ts`; with no name it lists what there is.
 * Benchmarks print a table and write JSON under `.bench/`; CI never runs them (timing is not a test).
 */
import { readdirSync } from "node:fs";
import { join } from "node:path";

const available = readdirSync(import.meta.dir)
  .filter((file) => file.endsWith(".ts") && file !== "index.ts" && !file.startsWith("_"))
  .map((file) => file.slice(0, -3))
  .sort();

const [name, ...args] = Bun.argv.slice(2);
if (name === undefined || !available.includes(name)) {
  console.error(`usage: bun run bench <${available.join("|")}> [options]`);
  process.exit(name === undefined ? 0 : 2);
}
const proc = Bun.spawn(["bun", join(import.meta.dir, `${name}.ts`), ...args], { stdio: ["inherit", "inherit", "inherit"] });
process.exit(await proc.exited);
