/**
 * Which GGUF files Parley serves: the files named (`PARLEY_MODEL`, a list; the first the default)
 * and every `.gguf` in the models directory, each a model known by its id (`general.name`, else
 * the file name). Without a named file the default is the directory's first model by file name
 * other than the demo and models of random weights (bench presets); without one, the built-in demo
 * model (written on first use so a fresh checkout answers).
 * The directory is read again on demand (`rescan`): a file added while serving appears without a
 * restart, and only a new or changed file's header is read.
 */
import { readdirSync, realpathSync, statSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { ModelNotFound } from "../errors";
import { RANDOM_WEIGHTS_KEY } from "../gguf/bench";
import { DEMO_FINGERPRINT_KEY, demoFingerprint } from "../gguf/demo";
import { describeGguf, InvalidModelError, type ModelDescription } from "../gguf/describe";
import { DEMO_MODEL_NAME, writePresetModel } from "../gguf/presets";
import { readGgufHeader } from "../gguf/reader";

export interface ModelSource {
  /** Named files, the first the default; empty: the directory's, else the demo. */
  paths: readonly string[];
  modelsDir: string;
  /** A name clients send (`gpt-4o-mini`) → a model's id. */
  aliases?: Readonly<Record<string, string>>;
}

/** A model Parley can serve. */
export interface ModelEntry {
  id: string;
  path: string;
  description: ModelDescription;
  /** Unix seconds of the file's last change: what OpenAI's listing calls a model's creation. */
  created: number;
  /** Its projector (an mmproj GGUF), through which it sees pictures. */
  projector?: string;
}

/** A file in the models directory that cannot be served, and why. */
export interface UnusableModel {
  path: string;
  reason: string;
}

type Described = Pick<ModelEntry, "description" | "created"> | UnusableModel;

const DEMO_FILE = `${DEMO_MODEL_NAME}.gguf`;
/**
 * A name of the default model whatever else the service serves, unless a model or alias takes it:
 * the docs' examples send it, and a client written against one model keeps working beside a second.
 */
export const DEFAULT_MODEL_NAME = "parley";
/** A request naming no model of the service reads the directory again at most this often. */
const RESCAN_GAP_MS = 1_000;

/** A start given a model file that does not exist, or an alias of no model: the message names the setting. */
export class ModelNotFoundError extends Error {
  override name = "ModelNotFoundError";
}

/** A start given a model file it cannot serve (damaged, not GGUF, an id another file has): the message names the file. */
export class UnservableModelError extends Error {
  override name = "UnservableModelError";
}

/** A request named a model this service does not have: its client is told `ModelNotFound`. */
export class UnknownModel extends ModelNotFound {
  override name = "UnknownModel";
  constructor(requested: string, known: readonly string[]) {
    super(`no model "${requested}": this service has ${known.map((id) => `"${id}"`).join(", ")} (GET /v1/models lists them)`);
  }
}

export class ModelRegistry {
  private entries: ModelEntry[] = [];
  private broken: UnusableModel[] = [];
  /** What each file's header said, by path, while its size and time are unchanged. */
  private readonly seen = new Map<string, { stamp: string; described: Described }>();
  private scannedAt = -Infinity;

  /** The default's file, without a named one: chosen by the rule at the start. */
  private defaultPath: string | undefined;

  private constructor(private readonly source: ModelSource) {}

  /**
   * The first reading. `ModelNotFoundError` when a named file is missing or an alias names no
   * model; `UnservableModelError` when a named file cannot be served or two models share an id:
   * the start is refused with the reason.
   */
  static async open(source: ModelSource): Promise<ModelRegistry> {
    for (const { model, projector } of source.paths.map(namedPair)) {
      if (!isFile(model)) throw new ModelNotFoundError(`PARLEY_MODEL (--model) is "${model}", which is not a readable file`);
      if (projector !== undefined && !isFile(projector)) {
        throw new ModelNotFoundError(`PARLEY_MODEL (--model) names "${projector}" as ${basename(model)}'s projector, which is not a readable file`);
      }
    }
    const registry = new ModelRegistry(source);
    registry.scan(true);
    if (source.paths.length === 0 && !registry.entries.some(chosenFirst)) {
      await ensureDemo(source.modelsDir);
      registry.scan(true);
    }
    for (const [alias, id] of Object.entries(source.aliases ?? {})) {
      if (!registry.entries.some((entry) => entry.id === id))
        throw new ModelNotFoundError(`PARLEY_MODEL_ALIASES maps "${alias}" to "${id}", which is no model of this service`);
    }
    return registry;
  }

  /** Reads the directory again: new files become models, removed ones go. */
  rescan(): void {
    this.scan(false);
  }

  /** Every model, the default first. */
  get models(): readonly ModelEntry[] {
    const first = this.default;
    return [first, ...this.entries.filter((entry) => entry !== first)];
  }

  get unusable(): readonly UnusableModel[] {
    return this.broken;
  }

  /** The first named chat model (else file); else the directory's first real chat model by file name; else the demo. */
  get default(): ModelEntry {
    if (this.source.paths.length > 0) return this.entries.find(isChat) ?? this.entries[0]!;
    // Chosen once, and kept while its file is there: a file added while serving is served by name, not made the default.
    const kept = this.entries.find((entry) => entry.path === this.defaultPath);
    if (kept) return kept;
    const chosen = this.entries.find(chosenFirst) ?? this.entries.find(isDemo) ?? this.entries[0]!;
    this.defaultPath = chosen.path;
    return chosen;
  }

  /** The default is the built-in demo: nothing else was named or found. */
  get demo(): boolean {
    return isDemo(this.default) && this.source.paths.length === 0;
  }

  /**
   * The model a request names: the default when it names none; else by id or alias, the directory
   * read again (at most once a second) when none matches; then, with one model, that one whatever
   * the name (clients send a fixed name such as "gpt-4o-mini"); else `UnknownModel`.
   */
  resolve(requested: string | undefined): ModelEntry {
    if (requested === undefined) return this.default;
    const find = () => {
      const id = this.source.aliases?.[requested] ?? requested;
      return this.entries.find((entry) => entry.id === id) ?? (requested === DEFAULT_MODEL_NAME ? this.default : undefined);
    };
    const entry = this.findAfresh(find);
    if (entry) return entry;
    if (this.entries.length === 1) return this.default;
    throw new UnknownModel(
      requested,
      this.entries.map((known) => known.id),
    );
  }

  /** The first model, the default first, that `matches` accepts; the directory read again (at most once a second) when none does. */
  first(matches: (entry: ModelEntry) => boolean): ModelEntry | undefined {
    return this.findAfresh(() => this.models.find(matches));
  }

  /** What `find` finds, else what it finds once the directory is read again, unless it was read within the last second. */
  private findAfresh(find: () => ModelEntry | undefined): ModelEntry | undefined {
    const entry = find();
    if (entry || performance.now() - this.scannedAt < RESCAN_GAP_MS) return entry;
    this.rescan();
    return find();
  }

  private scan(starting: boolean): void {
    this.scannedAt = performance.now();
    const pairs = this.source.paths.map(namedPair);
    const named = pairs.map(({ model }) => model);
    // One file by two names (PARLEY_MODEL naming a file of the directory, relatively or through a link) is one model.
    const files = new Set<string>();
    const paths = [...named, ...dirModels(this.source.modelsDir)].filter((path) => {
      const file = realPath(path);
      if (files.has(file)) return false;
      files.add(file);
      return true;
    });
    const entries: ModelEntry[] = [];
    const broken: UnusableModel[] = [];
    // Each directory read once a scan, however many models it holds.
    const listings = new Map<string, string[]>();
    const ggufsIn = (dir: string) => {
      let names = listings.get(dir);
      if (!names) listings.set(dir, (names = ggufFiles(dir)));
      return names;
    };
    for (const path of paths) {
      const described = this.describe(path);
      if ("reason" in described) {
        if (starting && named.includes(path)) throw new UnservableModelError(`cannot serve this model: ${path}: ${described.reason}`);
        broken.push(described);
        continue;
      }
      const { description, created } = described;
      const clash = entries.find((entry) => entry.id === description.name);
      // The demo an earlier start wrote into the directory yields to a named copy of it: Parley's own file, no operator's clash.
      if (clash && basename(path) === DEMO_FILE && !named.includes(path)) continue;
      if (clash) {
        const reason = `its model id "${description.name}" is already ${clash.path}'s: rename one (general.name, else the file name)`;
        if (starting) throw new UnservableModelError(`cannot serve this model: ${path}: ${reason}`);
        broken.push({ path, reason });
        continue;
      }
      const projector = description.purpose === "chat" ? (pairs.find(({ model }) => model === path)?.projector ?? projectorBeside(path, ggufsIn)) : undefined;
      entries.push({ id: description.name, path, description, created, ...(projector ? { projector } : {}) });
    }
    // A file gone (or renamed) must not keep its header in memory for the life of the process.
    for (const path of this.seen.keys()) if (!paths.includes(path)) this.seen.delete(path);
    // A rescan keeps serving what it had when the named files went missing meanwhile.
    if (entries.length === 0 && !starting) return;
    this.entries = entries;
    this.broken = broken;
  }

  private describe(path: string): Described {
    let stamp: string;
    let created: number;
    try {
      const stat = statSync(path);
      stamp = `${stat.size}:${stat.mtimeMs}`;
      created = Math.floor(stat.mtimeMs / 1000);
    } catch (error) {
      return { path, reason: `cannot be read (${(error as NodeJS.ErrnoException).code ?? "error"})` };
    }
    const cached = this.seen.get(path);
    if (cached?.stamp === stamp) return cached.described;
    let described: Described;
    try {
      described = { description: withoutArrays(describeGguf(path)), created };
    } catch (error) {
      if (!(error instanceof InvalidModelError)) throw error;
      described = { path, reason: error.reason };
    }
    this.seen.set(path, { stamp, described });
    return described;
  }
}

/** The demo file, written when missing or made by another version of the demo (its fingerprint differs). */
async function ensureDemo(modelsDir: string): Promise<void> {
  const path = join(modelsDir, DEMO_FILE);
  // writePresetModel replaces the file atomically, so a concurrent start never reads half of it.
  if (!isCurrentDemo(path)) await writePresetModel("demo", path);
}

function isCurrentDemo(path: string): boolean {
  try {
    const stamp = readGgufHeader(path).metadata[DEMO_FINGERPRINT_KEY];
    return stamp?.type === "string" && stamp.value === demoFingerprint();
  } catch {
    return false;
  }
}

/**
 * The names of the directory's `.gguf` files in plain code-point order (not the machine's locale);
 * none when it does not exist. A hidden file is a partial write (the demo writer's), not a model;
 * `mmproj-*.gguf` is a vision model's projector, which goes beside its model and is no model itself.
 */
export function ggufNames(dir: string): string[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
  return names.filter((n) => n.toLowerCase().endsWith(".gguf") && !n.startsWith(".") && !n.toLowerCase().startsWith("mmproj-")).sort();
}

/**
 * A named file, or a model and its projector named together (`model.gguf+mmproj.gguf`): a name
 * that is no file but has a `+` is read as the pair.
 */
function namedPair(named: string): { model: string; projector?: string } {
  const at = named.lastIndexOf("+");
  if (at <= 0 || isFile(named)) return { model: named };
  return { model: named.slice(0, at), projector: named.slice(at + 1) };
}

/**
 * The projector that goes with a model file: `mmproj-<its file name>` beside it; else the one
 * `mmproj-*.gguf` of a directory holding one model (a folder per model, as downloads come).
 * `ggufsIn` lists a directory's `.gguf` files, projectors too.
 */
function projectorBeside(path: string, ggufsIn: (dir: string) => string[]): string | undefined {
  const dir = dirname(path);
  const names = ggufsIn(dir);
  const own = `mmproj-${basename(path)}`;
  if (names.includes(own)) return join(dir, own);
  const projectors = names.filter((name) => name.toLowerCase().startsWith("mmproj-"));
  return projectors.length === 1 && names.length === 2 ? join(dir, projectors[0]!) : undefined;
}

/** A directory's visible `.gguf` files, projectors included; none when it cannot be read. */
function ggufFiles(dir: string): string[] {
  try {
    return readdirSync(dir).filter((name) => !name.startsWith(".") && name.toLowerCase().endsWith(".gguf"));
  } catch {
    return [];
  }
}

/** The directory's models, the demo among them. */
function dirModels(dir: string): string[] {
  return ggufNames(dir)
    .map((name) => join(dir, name))
    .filter(isFile);
}

const isDemo = (entry: ModelEntry) => basename(entry.path) === DEMO_FILE;

const isChat = (entry: ModelEntry) => entry.description.purpose === "chat";

/** A model the default may be without a named file: a chat model, neither the demo nor one of random weights. */
const chosenFirst = (entry: ModelEntry) => {
  const noise = entry.description.metadata[RANDOM_WEIGHTS_KEY];
  return isChat(entry) && !isDemo(entry) && !(noise?.type === "bool" && noise.value);
};

/**
 * The description as the registry keeps it, for as long as the file is served: without its array
 * values (the tokenizer's vocabulary, most of a header), which no reader of an entry needs; the
 * loader reads the file itself.
 */
function withoutArrays(description: ModelDescription): ModelDescription {
  return { ...description, metadata: Object.fromEntries(Object.entries(description.metadata).filter(([, value]) => value.type !== "array")) };
}

function realPath(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}

function isFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}
