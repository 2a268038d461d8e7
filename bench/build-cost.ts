/**
 * `bun run bench build-cost [--rounds N]`: what building Parley's natives behind a running server
 * (`bun run start` on a checkout without them: docs/operations.md, Natives) costs its replies.
 * `bun run start` from this checkout with an empty natives cache, a temp database and models
 * directory holding bench-small; 64-token greedy replies in paired rounds, the build's session
 * stopped (SIGSTOP) for one reply and running for the next, until the rounds are done (the build
 * is then let finish and the server stopped). Writes `.bench/build-cost-<time>.json`.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

const { values } = parseArgs({ args: Bun.argv.slice(2), options: { rounds: { type: "string", default: "10" } } });
const rounds = Number(values.rounds);
const root = join(import.meta.dir, "..");
const port = 18_181;
const url = `http://127.0.0.1:${port}`;
const temp = (prefix: string) => mkdtempSync(join(tmpdir(), `parley-${prefix}-`));
const models = temp("build-cost-models");
const env = {
  ...Bun.env,
  XDG_CACHE_HOME: temp("build-cost-cache"),
  PARLEY_PORT: String(port),
  PARLEY_DB: join(temp("build-cost-db"), "p.db"),
  PARLEY_MODELS_DIR: models,
};
Bun.spawnSync(["bun", "run", "parley", "model", "demo", "--preset", "bench-small", "--out", join(models, "parley-bench-small.gguf")], { cwd: root, env });
const server = Bun.spawn(["bun", "run", "start"], { cwd: root, env, stdout: "ignore", stderr: "ignore", detached: true });
const ready = async () => (await fetch(`${url}/readyz`).catch(() => undefined))?.status === 200;
while (!(await ready())) await Bun.sleep(100);
const made = Bun.spawnSync(["bun", "run", "parley", "keys", "create", "--user", "bench"], { cwd: root, env });
const key = new TextDecoder().decode(made.stdout).trim().split("\n").at(-1)!.trim();

/** A 64-token greedy reply's tokens a second. */
async function reply(n: number): Promise<number> {
  const started = performance.now();
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "parley-bench-small", temperature: 0, max_tokens: 64, messages: [{ role: "user", content: `the sea and the hill ${n}` }] }),
  });
  const { usage } = (await response.json()) as { usage: { completion_tokens: number } };
  return (usage.completion_tokens * 1000) / (performance.now() - started);
}

/** The build's session (its compiler's processes are in it), once it runs. */
async function buildSession(): Promise<string> {
  for (;;) {
    const pid = Bun.spawnSync(["pgrep", "-f", "tools/natives.ts"]).stdout.toString().trim().split("\n")[0];
    if (pid) return Bun.spawnSync(["ps", "-o", "sid=", "-p", pid]).stdout.toString().trim();
    await Bun.sleep(200);
  }
}
const session = await buildSession();
const signal = (name: "STOP" | "CONT") => Bun.spawnSync(["pkill", `-${name}`, "-s", session]);
await reply(0);
const pairs: { stopped: number; building: number }[] = [];
for (let round = 1; round <= rounds; round++) {
  signal("STOP");
  await Bun.sleep(2_000);
  const stopped = await reply(2 * round);
  signal("CONT");
  await Bun.sleep(3_000);
  const building = await reply(2 * round + 1);
  pairs.push({ stopped, building });
  console.log(`round ${round}: build stopped ${stopped.toFixed(1)} tok/s, building ${building.toFixed(1)} tok/s, ratio ${(building / stopped).toFixed(3)}`);
}
signal("CONT");
process.kill(-server.pid, "SIGINT");
await server.exited;

const sorted = (values: number[]) => [...values].sort((a, b) => a - b);
const median = (values: number[]) => sorted(values)[Math.floor(values.length / 2)]!;
const ratios = pairs.map((pair) => pair.building / pair.stopped);
const result = {
  bench: "build-cost",
  model: "parley-bench-small",
  replyTokens: 64,
  rounds: pairs,
  stoppedMedianTokS: median(pairs.map((pair) => pair.stopped)),
  buildingMedianTokS: median(pairs.map((pair) => pair.building)),
  ratio: { median: median(ratios), min: sorted(ratios)[0], max: sorted(ratios).at(-1) },
};
console.log(JSON.stringify(result, null, 2));
mkdirSync(join(root, ".bench"), { recursive: true });
const file = join(".bench", `build-cost-${new Date().toISOString().slice(0, 19).replaceAll(":", "-")}.json`);
writeFileSync(join(root, file), `${JSON.stringify(result, null, 2)}\n`);
console.log(`written ${file}`);
