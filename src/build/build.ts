/**
 * `bun run build [--outfile <path>] [--prebuilt-natives | --gpu cuda [--cuda-arch <list>]]
 * [--target linux-arm64] [--embed-model <file.gguf>[,<more>]]`: the single executable for linux-x64
 * (default `dist/parley`): the CLI, the migrations and node-llama-cpp's CPU natives, compressed; with
 * `--gpu cuda` the CUDA natives too (`bun run natives --gpu cuda`, compiled first when missing), which
 * `PARLEY_GPU=cuda` picks at start. `--target linux-arm64` makes it for ARM64 Linux, with the natives
 * cross-compiled (`bun run natives --target linux-arm64`). `--embed-model` carries models in it
 * (src/build/carry.ts), served with no models directory.
 * Which natives:
 *   - by default the fast, locally compiled ones (src/natives/compiled.ts), compiled first when this
 *     machine's cache has none (src/natives/compile.ts: 14 minutes of CPU time, once);
 *   - with `--prebuilt-natives`, the npm prebuilt `node_modules/@node-llama-cpp/linux-x64/bins/`
 *     (no compiler needed, slower decode): what the test suite builds, so CI never compiles.
 * Both are laid out alike: `<binsDir>/linux-x64/` with llama-addon.node, the libraries and
 * _nlcBuildMetadata.json.
 */
import { existsSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { ensureCompiledNatives } from "../natives/compile";
import { ARM64_FOLDER, CUDA_FOLDER, cudaArchitecturesOf, PLATFORM_FOLDER, targetOf } from "../natives/compiled";
import { packNatives } from "../natives/embed-pack";
import { assertPinnedVersion, nativesPlugin } from "../natives/embed-plugin";
import { NODE_LLAMA_CPP_VERSION } from "../natives/version";
import { type Carrying, carriedBytes, carriedModels, carryPlugin, checkCarriedSize } from "./carry";

const ROOT = resolve(import.meta.dir, "../..");
const PREBUILT_NATIVES = join(ROOT, "node_modules/@node-llama-cpp");

const { values: flags } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    outfile: { type: "string" },
    "prebuilt-natives": { type: "boolean", default: false },
    gpu: { type: "string" },
    "cuda-arch": { type: "string" },
    target: { type: "string" },
    "embed-model": { type: "string" },
  },
});
const cudaArchitectures = cudaArchitecturesOf(flags);
// npm's CUDA prebuilt lacks Parley's native methods, so the CUDA natives are always compiled ones.
if (cudaArchitectures !== undefined && flags["prebuilt-natives"]) throw new Error("--gpu cuda embeds compiled natives: leave out --prebuilt-natives");
const arm64 = targetOf(flags) === "linux-arm64";
if (arm64 && cudaArchitectures !== undefined) throw new Error("--target linux-arm64 is the CPU build only: leave out --gpu cuda");
const outfile = resolve(flags.outfile ?? join(ROOT, "dist/parley"));
const started = performance.now();

const packageDir = join(dirname(Bun.resolveSync("node-llama-cpp", ROOT)), "..");
// Before the slow part: a node-llama-cpp the patches were not written for, or a prebuilt package of
// another version (node-llama-cpp would refuse it at run time), fails at once.
assertPinnedVersion(packageDir);
const carrying: Carrying[] = flags["embed-model"] === undefined ? [] : await carriedModels(flags["embed-model"]);
const folder = arm64 ? ARM64_FOLDER : PLATFORM_FOLDER;
const binsDir = flags["prebuilt-natives"] ? await prebuiltNatives(folder) : await compiledNatives({ arm64 });
if (cudaArchitectures !== undefined) await compiledNatives({ cudaArchitectures });
const folders = cudaArchitectures === undefined ? [folder] : [folder, CUDA_FOLDER];
for (const folder of folders) {
  for (const required of ["llama-addon.node", "_nlcBuildMetadata.json"]) {
    if (!existsSync(join(binsDir, folder, required))) throw new Error(`${join(binsDir, folder)} has no ${required}`);
  }
}
const natives = await packNatives(binsDir, folders, NODE_LLAMA_CPP_VERSION, join(ROOT, "node_modules/.cache/parley"));
checkCarriedSize(carrying, Bun.file(natives.archive).size);

const result = await Bun.build({
  entrypoints: [join(ROOT, "src/cli.ts")],
  compile: {
    target: arm64 ? "bun-linux-arm64" : "bun-linux-x64",
    outfile,
    // The executable reads its configuration from the environment and flags only, like `bun run start`
    // from a checkout; a stray .env or bunfig.toml in the directory it is started from must not count.
    autoloadDotenv: false,
    autoloadBunfig: false,
    // drizzle's migrator reads a folder; an absolute path is embedded under its last name, as
    // /$bunfs/root/migrations and /$bunfs/root/pg-migrations, which is where src/db/sqlite/client.ts
    // and src/db/pg/client.ts look (so the two folders' last names must differ).
    assets: [join(ROOT, "src/db/sqlite/migrations"), join(ROOT, "src/db/pg/pg-migrations")],
  },
  // The Bun runtime alone is 107 MB of the 120 MB budget. Names stay unminified so stack traces read
  // without a source map; an embedded map would cost 2 MB, minified names only save 0.8 MB.
  minify: { whitespace: true, syntax: true, identifiers: false },
  plugins: [
    nativesPlugin({ natives, packageDir, cacheModule: join(ROOT, "src/natives/cache.ts") }),
    carryPlugin(carrying, join(ROOT, "src/carried/models.ts")),
  ],
});
if (!result.success) {
  for (const log of result.logs) console.error(log);
  process.exit(1);
}

const mb = (bytes: number) => `${(bytes / 1e6).toFixed(1)} MB`;
// Past its format's limit Bun wraps a file's size and says nothing: a smaller executable than its models tells.
if (statSync(outfile).size < carriedBytes(carrying)) {
  throw new Error(
    `${outfile} is ${mb(statSync(outfile).size)}, smaller than the ${mb(carriedBytes(carrying))} of models it should carry: Bun dropped part of them`,
  );
}
console.log(
  `Built ${relative(process.cwd(), outfile) || outfile} (${mb(statSync(outfile).size)}) in ${((performance.now() - started) / 1000).toFixed(1)} s; ` +
    `natives ${natives.id}: ${natives.files} files, ${mb(natives.bytes)} from ${folders.map((folder) => join(binsDir, folder)).join(" and ")}, ${mb(Bun.file(natives.archive).size)} compressed; ` +
    `the target needs glibc ≥ ${natives.requires.glibc} and libstdc++ with GLIBCXX_${natives.requires.glibcxx}` +
    carrying.map((model) => `; carries ${model.id} (${model.name}, ${mb(model.bytes)}${model.projector ? ` + ${model.projector.name}` : ""})`).join(""),
);

/** The npm prebuilt package of `folder` (linux-x64, linux-arm64): its `bins/`. */
async function prebuiltNatives(folder: string): Promise<string> {
  const dir = join(PREBUILT_NATIVES, folder);
  const { version } = (await Bun.file(join(dir, "package.json")).json()) as { version: string };
  if (version !== NODE_LLAMA_CPP_VERSION) throw new Error(`${dir} is version ${version}, node-llama-cpp is ${NODE_LLAMA_CPP_VERSION}`);
  return join(dir, "bins");
}

async function compiledNatives(options: { cudaArchitectures?: string; arm64?: boolean }): Promise<string> {
  const { binsDir, compiledSeconds } = await ensureCompiledNatives(options);
  if (compiledSeconds !== undefined) console.log(`natives: compiled into ${binsDir} in ${compiledSeconds} s`);
  return binsDir;
}
