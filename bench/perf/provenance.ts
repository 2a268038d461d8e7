/**
 * What a result file says of where its figures came from (issue #64), so that a figure can be
 * quoted with the run behind it: Parley's commit, the llama.cpp both sides were built from, the
 * natives, the machine, the model file, the workload, and every server as it was started. Paths are
 * the repository's relative ones, or a file's name where it lay outside (a temp directory).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { basename, dirname, isAbsolute, join, relative } from "node:path";
import { launches } from "./procs";

const ROOT = join(import.meta.dir, "../..");

/** A path as a record may hold it: relative to the checkout, else the file's name alone. */
export function recordedPath(path: string): string {
  if (!isAbsolute(path)) return path;
  const inside = relative(ROOT, path);
  return inside.startsWith("..") ? `<outside>/${basename(path)}` : inside;
}

/** A flag's or variable's value, paths in it (a list of them, too: `PARLEY_MODEL=a.gguf,b.gguf`) recorded as paths. */
const recordedValue = (value: string) =>
  value
    .split(",")
    .map((part) => (isAbsolute(part) ? recordedPath(part) : part))
    .join(",");

export async function sha256(path: string): Promise<string | null> {
  if (!existsSync(path)) return null;
  const hasher = new Bun.CryptoHasher("sha256");
  for await (const chunk of Bun.file(path).stream()) hasher.update(chunk);
  return hasher.digest("hex");
}

/** A command's first line of output, or null where it is not there (no git on the GPU machine, no nvidia-smi on a CPU). */
function output(argv: string[], cwd = ROOT): string | null {
  try {
    const result = Bun.spawnSync(argv, { cwd, stdout: "pipe", stderr: "ignore" });
    return result.exitCode === 0 ? result.stdout.toString().trim() : null;
  } catch {
    return null;
  }
}

/**
 * The checkout as the run began (a run takes many minutes; what changed later did not run), with
 * the tracked files then modified named, so a reader can tell a note in the docs from a change to
 * what was measured.
 */
const atStart = (() => {
  const commit = output(["git", "rev-parse", "HEAD"]);
  const modified = commit === null ? null : (output(["git", "diff", "--name-only", "HEAD"]) ?? "").split("\n").filter((path) => path !== "");
  return {
    commit: commit ?? Bun.env.PARLEY_BENCH_COMMIT ?? null,
    dirty: modified === null ? null : modified.length > 0,
    ...(modified?.length ? { modified } : {}),
  };
})();

/** The commit of the llama.cpp source node-llama-cpp ships, which Parley's natives and llama-server are built from. */
function llamaCppCommit(): string | null {
  const bundle = join(ROOT, "node_modules/node-llama-cpp/llama/gitRelease.bundle");
  const heads = existsSync(bundle) ? output(["git", "bundle", "list-heads", bundle]) : null;
  return heads?.split(/\s/)[0] ?? Bun.env.PARLEY_BENCH_LLAMA_CPP_COMMIT ?? null;
}

/** The natives' build and its plugins, each by its file's hash, found under a natives folder. */
async function nativesIn(dir: string) {
  const files: Record<string, string | null> = {};
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (entry.isFile() && /(llama-addon\.node|libggml-cuda\.so)$/.test(entry.name)) {
      files[relative(dir, join(entry.parentPath, entry.name))] = await sha256(join(entry.parentPath, entry.name));
    }
  }
  return files;
}

async function natives(nativesDir: string | undefined, localCompiled: string | undefined, binary: string | undefined) {
  if (binary !== undefined) {
    return {
      kind: "embedded in the executable",
      executable: { file: recordedPath(binary), sha256: await sha256(binary) },
      ...(nativesDir && existsSync(nativesDir) ? { unpacked: await nativesIn(nativesDir) } : {}),
    };
  }
  if (localCompiled && existsSync(localCompiled)) return { kind: "compiled", recipe: basename(dirname(localCompiled)), files: await nativesIn(localCompiled) };
  return { kind: "node-llama-cpp's npm prebuilt" };
}

function machine() {
  const gpu = output(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]);
  const cuda = output(["nvidia-smi"])?.match(/CUDA Version:\s*([\d.]+)/)?.[1] ?? null;
  const os = existsSync("/etc/os-release") ? (/^PRETTY_NAME="?([^"\n]*)/m.exec(readFileSync("/etc/os-release", "utf8"))?.[1] ?? null) : null;
  return {
    cpu: cpus()[0]?.model ?? null,
    cores: navigator.hardwareConcurrency,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    os,
    kernel: output(["uname", "-r"]),
    gpu: gpu === null ? null : { devices: gpu.split("\n"), cuda },
  };
}

/** The servers started, each distinct way once: a scenario starts many alike. */
function launchedServers() {
  const seen = new Map<string, (typeof launches)[number]>();
  for (const launch of launches) {
    const recorded = {
      server: launch.server,
      command: launch.command.map(recordedValue),
      ...(launch.env ? { env: Object.fromEntries(Object.entries(launch.env).map(([name, value]) => [name, recordedValue(value)])) } : {}),
    };
    seen.set(JSON.stringify(recorded), recorded);
  }
  return [...seen.values()];
}

export interface ProvenanceInput {
  model: string;
  llamaServer: string | undefined;
  binary: string | undefined;
  nativesDir: string | undefined;
  localCompiled: string | undefined;
}

export async function provenance(input: ProvenanceInput) {
  return {
    parley: atStart,
    llamaCpp: { commit: llamaCppCommit() },
    natives: await natives(input.nativesDir, input.localCompiled, input.binary),
    machine: machine(),
    model: { file: recordedPath(input.model), sha256: await sha256(input.model) },
    llamaServer: input.llamaServer === undefined ? null : { file: recordedPath(input.llamaServer), sha256: await sha256(input.llamaServer) },
    servers: launchedServers(),
  };
}
