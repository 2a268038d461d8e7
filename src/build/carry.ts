/**
 * `bun run build --embed-model <model.gguf>[,<more>]`: the models the executable carries, the first
 * the default. A model that sees pictures is named with its projector, `<model.gguf>+<mmproj.gguf>`,
 * as PARLEY_MODEL names one. Each file is read for its header (a file llama.cpp could not load fails
 * the build, not a start), hashed, and embedded as a file of the executable; the module
 * src/carried/models.ts is replaced by one listing them, which a start unpacks
 * (src/carried/unpack.ts).
 */
import { basename, resolve } from "node:path";
import type { BunPlugin } from "bun";
import type { CarriedFile, CarriedModel } from "../carried/models";
import { describeGguf, InvalidModelError, PROJECTOR_ARCHITECTURE } from "../gguf/describe";

/**
 * Bun 1.4's executable format records its files' offsets and sizes in 32 bits: past 4 GiB in all, a
 * file's size silently wraps (a 4100 MiB file came out as 4 MiB, and the build said nothing).
 */
export const BUN_EXECUTABLE_LIMIT = 2 ** 32;
/** Room for the rest of the executable's embedded part: the bundled code, the migrations, the page. */
const REST_OF_EXECUTABLE = 64 * 2 ** 20;

/** A carried file and where the build reads it. */
export type Carrying = CarriedModel & { source: string; projector?: CarriedFile & { source: string } };

/** The files named by `--embed-model`, described and hashed; throws naming the file that cannot be carried. */
export async function carriedModels(list: string): Promise<Carrying[]> {
  const named = list
    .split(",")
    .map((item) => item.trim())
    .filter((item) => item !== "");
  if (named.length === 0) throw new Error("--embed-model names no file");
  const models: Carrying[] = [];
  for (const item of named) {
    const [model, projector, ...more] = item.split("+");
    if (more.length > 0) throw new Error(`--embed-model: "${item}" names more than a model and its projector`);
    const description = describe(model!, false);
    models.push({
      ...(await carried(model!)),
      id: description.name,
      ...(projector === undefined ? {} : { projector: (describe(projector, true), await carried(projector)) }),
    });
  }
  return models;
}

/** Throws unless the carried files and the natives fit the executable's format. */
export function checkCarriedSize(models: readonly Carrying[], nativesBytes: number): void {
  const total = carriedBytes(models) + nativesBytes + REST_OF_EXECUTABLE;
  if (total > BUN_EXECUTABLE_LIMIT) {
    throw new Error(
      `--embed-model: ${(carriedBytes(models) / 2 ** 30).toFixed(2)} GiB of models is more than Bun's executable can hold ` +
        `(${BUN_EXECUTABLE_LIMIT / 2 ** 30} GiB with the natives and code, ${((nativesBytes + REST_OF_EXECUTABLE) / 2 ** 20).toFixed(0)} MiB): ` +
        "serve a larger model from the models directory or PARLEY_MODEL",
    );
  }
}

export function carriedBytes(models: readonly Carrying[]): number {
  return models.reduce((sum, model) => sum + model.bytes + (model.projector?.bytes ?? 0), 0);
}

/** Replaces src/carried/models.ts (`modelsModule`, its absolute path) with the list of `models`, each file embedded. */
export function carryPlugin(models: readonly Carrying[], modelsModule: string): BunPlugin {
  const imports: string[] = [];
  const entry = ({ source, ...file }: { source: string }) => {
    const name = `carried${imports.length}`;
    imports.push(`import ${name} from ${JSON.stringify(source)} with { type: "file" };`);
    return `{ ...${JSON.stringify(file)}, asset: ${name} }`;
  };
  const listed = models.map(({ projector, ...model }) => (projector ? `{ ...${entry(model)}, projector: ${entry(projector)} }` : entry(model)));
  const contents = [...imports, `export const CARRIED_MODELS = [${listed.join(", ")}];`].join("\n");
  let replaced = false;
  return {
    name: "parley-carried-models",
    setup(build) {
      build.onLoad({ filter: new RegExp(`^${modelsModule.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`) }, () => {
        replaced = true;
        return { loader: "js", contents };
      });
      build.onEnd((result) => {
        if (result.success && !replaced) throw new Error(`carried models: the build never loaded ${modelsModule}`);
      });
    },
  };
}

function describe(path: string, projector: boolean) {
  try {
    const description = describeGguf(path);
    if ((description.architecture === PROJECTOR_ARCHITECTURE) !== projector) {
      throw new InvalidModelError(
        path,
        projector ? "is no projector (mmproj): name a model's projector after its +" : "is a projector: name it after its model's file, model.gguf+mmproj.gguf",
      );
    }
    return description;
  } catch (error) {
    if (error instanceof InvalidModelError) throw new Error(`--embed-model: ${error.message}`);
    throw error;
  }
}

async function carried(path: string): Promise<CarriedFile & { source: string }> {
  const source = resolve(path);
  const hasher = new Bun.CryptoHasher("sha256");
  let bytes = 0;
  for await (const chunk of Bun.file(source).stream()) {
    hasher.update(chunk);
    bytes += chunk.length;
  }
  // The asset's path is the executable's to give; the build's plugin fills it in.
  return { source, name: basename(source), asset: "", sha256: hasher.digest("hex"), bytes };
}
