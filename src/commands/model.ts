import { existsSync } from "node:fs";
import { basename, dirname, join, sep } from "node:path";
import { CARRIED_MODELS, type CarriedModel } from "../carried/models";
import { CONFIG_SPEC, type Config } from "../config";
import { describeGguf, InvalidModelError, type ModelDescription, type ModelPurpose, type ProjectorDescription, projectorOf } from "../gguf/describe";
import { DEMO_MODEL_NAME, MODEL_PRESETS, type ModelPreset, PRESET_FILE_TYPES, presetFileName, presetFileType, writePresetModel } from "../gguf/presets";
import type { GgufValue } from "../gguf/values";
import { projectorFileName } from "../gguf/vision";
import { describeModel, ggufNames, unclaimedId } from "../llm/model";
import { formatBytes, formatCount } from "./units";

interface Subcommand {
  readonly summary: string;
  readonly usage: string;
  readonly details: string;
  readonly positionals: number;
  /** Besides --help and the configuration flags, which every subcommand accepts. */
  readonly flags: readonly string[];
  readonly run: (config: Config, args: readonly string[], flags: Map<string, string>) => Promise<number> | number;
}

const EXIT_CODES = "Exit codes: 0 ok, 1 failure (bad file, download failed), 2 usage error.";

const SUBCOMMANDS: Record<string, Subcommand> = {
  list: {
    summary: "GGUF files in the models directory, with what their headers say",
    usage: "parley model list [--models-dir <dir>]",
    details: `Lists the .gguf files in the models directory (PARLEY_MODELS_DIR or --models-dir, default
./models) with the id requests name them by, architecture, parameters, size, context length,
quantization and whether the file carries a chat template, all read from each file's GGUF header.
A file that cannot be used is listed with the reason. Which models a running server has loaded
is GET /v1/models's "loaded".`,
    positionals: 0,
    flags: [],
    run: (config) => list(config.modelsDir),
  },
  embedded: {
    summary: "the models this executable carries, with each file's sha256",
    usage: "parley model embedded",
    details: `Lists the models built into this executable (bun run build --embed-model): the id requests
name each by, its file, size and sha256, the first the default. A start unpacks them once into
<data dir>/carried/<sha256>/ and serves them with no models directory; PARLEY_MODEL and the
models directory add to them. From a checkout, or an executable built without models, there are none.`,
    positionals: 0,
    flags: [],
    run: () => embedded(CARRIED_MODELS),
  },
  info: {
    summary: "everything one GGUF file's header says about the model",
    usage: "parley model info <file>",
    details: `Describes one GGUF file from its header. <file> is a path, or a file name in the models
directory. A missing, non-GGUF, corrupt or truncated file exits 1 with a one-line reason.`,
    positionals: 1,
    flags: [],
    run: (config, [file]) => info(resolveFile(file!, config.modelsDir)),
  },
  pull: {
    summary: "download a model (needs a network); resumes an interrupted download",
    usage: "parley model pull <url | hf-uri> [--out <dir | file.gguf>]",
    details: `Downloads a GGUF model into the models directory (or --out) with progress on stderr, then
checks it: a file that is not a usable GGUF model is reported and removed. An interrupted
download (Ctrl-C, lost connection) resumes when the same command is run again; a file that is
already there with the remote size is not downloaded again.

  https://host/path/model.gguf
  hf:<user>/<repo>:<quant>         e.g. hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M
  hf:<user>/<repo>/<file.gguf>

Pulling needs a network (hf: URIs need huggingface.co, or HF_ENDPOINT). Parley never downloads
anything while serving; on an offline machine, copy the .gguf file into the models directory.`,
    positionals: 1,
    flags: ["--out"],
    run: async (config, [uri], flags) => {
      if (!/^(https?:\/\/|hf:)/i.test(uri!)) return usageError("pull", `"${uri}" is not an http(s):// URL or an hf: URI`);
      // Imported here: node-llama-cpp takes a few hundred ms to load and only pull needs it.
      const { pullModel } = await import("./model-pull");
      return pullModel(uri!, flags.get("--out"), config.modelsDir);
    },
  },
  demo: {
    summary: "write a model Parley generates itself",
    usage: `parley model demo [--preset ${MODEL_PRESETS.join("|")}] [--type ${typeNames("bench-small").join("|")}] [--out <file.gguf>]`,
    details: `Writes a model Parley generates itself (no download): by default the demo model into the models directory.

  demo          a tiny bigram model that answers with sentences of its corpus; f32 only (its
                greedy reply rests on logits closer together than a quantization step)
  llama3, qwen2, gemma, mistral, phi3, qwen3-thinking
                bigram models like demo in a real family's format: its tokenizer (byte-level
                BPE for llama3/qwen2/qwen3-thinking, SentencePiece for the others), special
                tokens, end-of-turn token and the chat template its instruct models ship;
                qwen3-thinking reasons in <think>…</think> before it answers. f32 only.
  bench-small   random weights in the shape of a ~98 M-parameter llama model, for benchmarks;
                --type f16 (default), q8_0 or q4_0. A quantized file holds the tensors
                llama-quantize makes of the f16 file, bit for bit: norms stay f32, a q4_0 file keeps
                output.weight in q8_0 (as --output-tensor-type q8_0 does; llama-quantize's
                default there, q6_k, is not written here).
  bench-draft   random weights of bench-small's vocabulary in a far smaller shape: a draft
                model for it (PARLEY_DRAFT_MODEL); f16 only.
  bench-1b      random weights of bench-small's vocabulary in TinyLlama 1.1B's shape (~1 B
                parameters), the GPU benchmark's model; --type f16 (default) or q4_0.
  vision        bench-draft's shape as parley-vision, and beside it its projector
                (mmproj-<file>.gguf: a LLaVA-style CLIP projector of random weights, 32×32
                images in 16 tokens) that llama.cpp's mtmd loads (llama-server --mmproj).
                Parley serves the pair: parley-vision takes pictures (with Parley's compiled
                natives). f16 only.`,
    positionals: 0,
    flags: ["--preset", "--type", "--out"],
    run: (config, _args, flags) => demo(config, flags),
  },
};

const OVERVIEW = `usage: parley model <command> [options]

Commands:
${Object.entries(SUBCOMMANDS)
  .map(([name, sub]) => `  ${name.padEnd(6)}${sub.summary}`)
  .join("\n")}

Run parley model <command> --help for details. ${EXIT_CODES}`;

const CONFIG_FLAGS = new Set(Object.values(CONFIG_SPEC).map((spec) => spec.flag));

function usageError(name: string, problem: string): number {
  console.error(`parley model ${name}: ${problem}\nusage: ${SUBCOMMANDS[name]!.usage}   (see --help)`);
  return 2;
}

/** `parley model list|info|pull|demo`; returns the process exit code. */
export async function modelCommand(config: Config, args: readonly string[], flags: Map<string, string>): Promise<number> {
  const [name, ...rest] = args;
  const sub = name === undefined ? undefined : SUBCOMMANDS[name];
  if (sub === undefined) {
    if (flags.has("--help") && name === undefined) {
      console.log(OVERVIEW);
      return 0;
    }
    console.error(name === undefined ? OVERVIEW : `parley model: unknown command "${name}"\n\n${OVERVIEW}`);
    return 2;
  }
  if (flags.has("--help")) {
    console.log(`usage: ${sub.usage}\n\n${sub.details}\n\n${EXIT_CODES}`);
    return 0;
  }
  const foreign = [...flags.keys()].filter((flag) => !CONFIG_FLAGS.has(flag) && !sub.flags.includes(flag));
  if (foreign.length > 0) return usageError(name!, `${foreign.join(", ")} does not apply here`);
  if (rest.length !== sub.positionals) {
    return usageError(name!, sub.positionals === 0 ? "takes no arguments" : "takes exactly one argument");
  }
  return sub.run(config, rest, flags);
}

const isPreset = (name: string): name is ModelPreset => (MODEL_PRESETS as readonly string[]).includes(name);

/** File types as llama-quantize's command line spells them: f16, q8_0, q4_0. */
function typeNames(preset: ModelPreset): string[] {
  return PRESET_FILE_TYPES[preset].map((t) => t.toLowerCase());
}

async function demo(config: Config, flags: Map<string, string>): Promise<number> {
  const preset = flags.get("--preset") ?? "demo";
  if (!isPreset(preset)) return usageError("demo", `unknown preset "${preset}"`);
  const typeFlag = flags.get("--type");
  const fileType = presetFileType(preset, typeFlag);
  if (fileType === undefined) {
    return usageError("demo", `the ${preset} model is written as ${typeNames(preset).join(", ")}, not "${typeFlag}"`);
  }
  const stem = preset === "demo" ? DEMO_MODEL_NAME : `parley-${preset}`;
  const out = flags.get("--out") ?? join(config.modelsDir, presetFileName(stem, preset, fileType));
  const started = performance.now();
  await writePresetModel(preset, out, fileType);
  const { size } = Bun.file(out);
  const projector = preset === "vision" ? ` and its projector to ${join(dirname(out), projectorFileName(basename(out)))}` : "";
  console.log(`Wrote the ${preset} model (${fileType}) to ${out}${projector} (${(size / 1e6).toFixed(1)} MB, ${Math.round(performance.now() - started)} ms)`);
  return 0;
}

function embedded(models: readonly CarriedModel[]): number {
  if (models.length === 0) {
    console.log("This executable carries no models (bun run build --embed-model <file.gguf> makes one that does)");
    return 0;
  }
  const rows = models.flatMap((model, i) => [
    [model.id + (i === 0 ? " (default)" : ""), model.name, formatBytes(model.bytes), model.sha256],
    ...(model.projector ? [[`  its projector`, model.projector.name, formatBytes(model.projector.bytes), model.projector.sha256]] : []),
  ]);
  const header = ["ID", "FILE", "SIZE", "SHA256"];
  const widths = header.map((h, i) => rows.reduce((widest, row) => Math.max(widest, row[i]!.length), h.length));
  for (const row of [header, ...rows]) console.log(row.map((cell, i) => (i < row.length - 1 ? cell.padEnd(widths[i]!) : cell)).join("  "));
  return 0;
}

function list(dir: string): number {
  const names = ggufNames(dir);
  if (names.length === 0) {
    console.log(`No GGUF files in ${dir}`);
    return 0;
  }
  // Ids as the service gives them: the first file of an id keeps it, the next gets one of its own.
  const owners = new Map<string, string>();
  const clashes: string[] = [];
  const rows = names.map((file): string[] => {
    let m: ModelDescription;
    try {
      m = describeModel(join(dir, file));
    } catch (err) {
      if (!(err instanceof InvalidModelError)) throw err;
      return [file, `unusable: ${err.reason}`];
    }
    const owner = owners.get(m.name);
    const id = owner === undefined ? m.name : unclaimedId(file, owners);
    if (owner !== undefined)
      clashes.push(`${file} is served as "${id}": its model id "${m.name}" is ${owner}'s (rename one: general.name, else the file name)`);
    owners.set(id, file);
    const template = m.metadata["tokenizer.chat_template"] === undefined ? "no" : "yes";
    return [file, id, m.architecture ?? "?", formatCount(m.parameters), formatBytes(m.sizeBytes), String(m.contextLength ?? "?"), m.quantization, template];
  });
  const header = ["FILE", "ID", "ARCH", "PARAMS", "SIZE", "CONTEXT", "QUANT", "TEMPLATE"];
  // An unusable file's reason starts in the ID column and does not widen it.
  const widths = header.map((h, i) => rows.reduce((widest, r) => Math.max(widest, r.length === header.length || i === 0 ? r[i]!.length : 0), h.length));
  for (const row of [header, ...rows]) console.log(row.map((cell, i) => (i < row.length - 1 ? cell.padEnd(widths[i]!) : cell)).join("  "));
  console.log(`\n${dir}: ${names.length} file(s)`);
  for (const clash of clashes) console.log(`warning: ${clash}`);
  return 0;
}

/** A bare file name that is not in the working directory is looked up in the models directory. */
function resolveFile(file: string, modelsDir: string): string {
  if (existsSync(file) || file.includes(sep) || file.includes("/")) return file;
  const inModels = join(modelsDir, file);
  return existsSync(inModels) ? inModels : file;
}

async function info(path: string): Promise<number> {
  let m: ModelDescription;
  try {
    m = describeGguf(path);
  } catch (err) {
    if (!(err instanceof InvalidModelError)) throw err;
    console.error(err.message);
    return 1;
  }
  const projector = projectorOf(m);
  const lines = [...common(m), ...(projector ? projectorFacts(m, projector) : modelFacts(m)), ...trailer(m)];
  for (const [key, value] of lines) if (value !== undefined) console.log(`${key.padEnd(17)}${value}`);
  if (projector || m.purpose !== "chat") return 0;
  let format: string;
  try {
    // Imported here: node-llama-cpp takes a few hundred ms to load, and only this line needs it.
    const { chatFormatOf } = await import("../llm/chat-wrapper");
    format = await chatFormatOf(m.path);
  } catch (err) {
    console.error(`${m.path}: llama.cpp cannot read its vocabulary, so it cannot be served: ${firstLine(err)}`);
    return 1;
  }
  console.log(`${"chat format".padEnd(17)}${format}`);
  return 0;
}

type Fact = [string, string | undefined];

const KINDS: Record<ModelPurpose, string> = {
  chat: "chat model",
  embedding: "embedding model: turns text into a vector (POST /v1/embeddings); it has no chat format",
  ranking: "reranking model: scores documents against a query (POST /v1/rerank); it has no chat format",
};

function common(m: ModelDescription): Fact[] {
  return [
    ["file", m.path],
    ["name", m.name],
    ["architecture", m.architecture ?? "unknown"],
  ];
}

function sizes(m: ModelDescription): Fact[] {
  return [
    ["parameters", `${formatCount(m.parameters)} (${m.parameters})`],
    ["quantization", m.quantization],
    ["size", `${formatBytes(m.sizeBytes)} (${m.sizeBytes} bytes)`],
  ];
}

function trailer(m: ModelDescription): Fact[] {
  const meta = (key: string) => scalar(m.metadata[key]);
  const splitCount = meta("split.count");
  return [
    ["license", meta("general.license")],
    ["split", splitCount === undefined ? undefined : `part ${Number(meta("split.no") ?? 0) + 1} of ${splitCount}`],
    ["tensors", String(m.tensors)],
    ["gguf version", String(m.ggufVersion)],
  ];
}

function modelFacts(m: ModelDescription): Fact[] {
  const meta = (key: string): GgufValue | undefined => m.metadata[key];
  const arch = (key: string) => scalar(meta(`${m.architecture}.${key}`));
  const tokens = meta("tokenizer.ggml.tokens");
  const template = meta("tokenizer.chat_template");
  const noTemplate = m.purpose === "chat" ? "none (a prompt format is guessed from the name and architecture)" : "none";
  return [
    ["kind", KINDS[m.purpose]],
    ...sizes(m),
    ["context length", m.contextLength === undefined ? "unknown" : String(m.contextLength)],
    ["layers", arch("block_count")],
    ["embedding length", arch("embedding_length")],
    ["attention heads", arch("attention.head_count")],
    ["vocabulary", tokens?.type === "array" ? `${tokens.items.length} tokens (${scalar(meta("tokenizer.ggml.model")) ?? "unknown"} tokenizer)` : undefined],
    ["chat template", template?.type === "string" ? `yes (${template.value.length} characters)` : noTemplate],
  ];
}

function projectorFacts(m: ModelDescription, p: ProjectorDescription): Fact[] {
  const known = (n: number | undefined) => (n === undefined ? "?" : String(n));
  const vision = p.vision;
  return [
    ["kind", "projector (mmproj): turns pictures into a model's input; served beside its model, never on its own"],
    ["projector type", p.type],
    [
      "image size",
      vision ? `${known(vision.imageSize)}×${known(vision.imageSize)} pixels in ${known(vision.patchSize)}×${known(vision.patchSize)} patches` : undefined,
    ],
    ["vision encoder", vision ? `${known(vision.blocks)} blocks of width ${known(vision.width)}` : undefined],
    ["audio encoder", p.audio ? "yes" : undefined],
    ["output width", p.outputWidth === undefined ? undefined : `${p.outputWidth} (its model's embedding length)`],
    ...sizes(m),
  ];
}

const firstLine = (error: unknown) => String((error as Error)?.message ?? error).split("\n")[0];

function scalar(value: GgufValue | undefined): string | undefined {
  return value === undefined || value.type === "array" ? undefined : String(value.value);
}
