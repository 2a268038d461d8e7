/**
 * `bun bench/gpu/pack.ts [--cuda-arch 90]`: everything the GPU machine needs, packed into
 * `.gpu/payload.tar.xz` (ignored by git; the device call carries `.gpu`), since that machine has
 * no network, no Bun and no node_modules, and a call sends at most 64 MiB:
 *   - `parley`: the executable built with the CUDA natives (`bun run build --gpu cuda`) for the
 *     architectures given (default Hopper's alone: each one adds its kernels' size), which also
 *     runs the benchmark's scripts as Bun would (`BUN_BE_BUN=1`);
 *   - `llama/`: llama-server built with its backends as plugins (bench/perf/yardstick.ts) and the
 *     CUDA plugin of those natives beside it, so both servers run the same kernels;
 *   - `bench/perf.js`, `bench/check.js`: the benchmark and the correctness check, bundled.
 * bench/gpu/run.sh unpacks and runs it; `bash bench/gpu/run.sh --cpu` rehearses it here.
 */
import { copyFileSync, cpSync, mkdirSync, readdirSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { CUDA_FOLDER, compiledNativesDir } from "../../src/natives/compiled";
import { NODE_LLAMA_CPP_VERSION } from "../../src/natives/version";
import { buildPluginLlamaServer } from "../perf/yardstick";

const ROOT = join(import.meta.dir, "../..");
/** What one device call may send, the working tree included. */
const SEND_LIMIT = 64 * 2 ** 20;

const { values } = parseArgs({ args: Bun.argv.slice(2), options: { "cuda-arch": { type: "string", default: "90" } } });
const stage = join(ROOT, ".bench/gpu-stage");
const packed = join(ROOT, ".gpu/payload.tar.xz");
rmSync(stage, { recursive: true, force: true });
mkdirSync(join(stage, "llama"), { recursive: true });
mkdirSync(join(ROOT, ".gpu"), { recursive: true });

const step = async (what: string, cmd: string[]) => {
  console.error(`pack: ${what}`);
  const code = await Bun.spawn(cmd, { cwd: ROOT, stdio: ["ignore", "inherit", "inherit"] }).exited;
  if (code !== 0) throw new Error(`pack: ${cmd.join(" ")} exited with ${code}`);
};

await step("the executable with the CUDA natives", [
  "bun",
  "run",
  "build",
  "--gpu",
  "cuda",
  "--cuda-arch",
  values["cuda-arch"]!,
  "--outfile",
  join(stage, "parley"),
]);
const server = await buildPluginLlamaServer();
const bin = join(server, "..");
copyFileSync(server, join(stage, "llama/llama-server"));
for (const name of readdirSync(bin).filter((file) => /^lib.*\.so$/.test(file))) copyFileSync(join(bin, name), join(stage, "llama", name));
cpSync(join(compiledNativesDir(NODE_LLAMA_CPP_VERSION), CUDA_FOLDER, "libggml-cuda.so"), join(stage, "llama/libggml-cuda.so"));
for (const script of ["perf.ts", "gpu/check.ts"]) {
  const entry = join(ROOT, "bench", script);
  const result = await Bun.build({ entrypoints: [entry], target: "bun", outdir: join(stage, "bench") });
  if (!result.success) throw new Error(`pack: bundling ${entry} failed: ${result.logs.join("\n")}`);
}
await step("compressing", ["tar", "-cf", packed, "-I", "xz -9 -T0", "-C", stage, "."]);

const tracked = (await Bun.$`git ls-files -z`.cwd(ROOT).text()).split("\0").filter(Boolean);
const treeBytes = tracked.reduce((sum, file) => sum + (statSync(join(ROOT, file), { throwIfNoEntry: false })?.size ?? 0), 0);
const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
const total = treeBytes + statSync(packed).size;
console.log(`pack: ${packed} ${mib(statSync(packed).size)}, with the working tree ${mib(total)} of ${mib(SEND_LIMIT)}`);
if (total > SEND_LIMIT) throw new Error("pack: over what a device call may send; build for fewer CUDA architectures");
