import { describe, expect, test } from "bun:test";
import { copyFileSync, readFileSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { DEMO_FINGERPRINT_KEY, demoFingerprint } from "../../src/gguf/demo";
import { describeGguf, integer } from "../../src/gguf/describe";
import { familyGguf } from "../../src/gguf/families";
import { readGgufHeader } from "../../src/gguf/reader";
import { type GgufFile, writeGguf } from "../../src/gguf/writer";
import { memoryNeed, refuseUnlessFits, withProjector } from "../../src/llm/memory-need";
import { ModelRegistry, type ModelSource, UnknownModel } from "../../src/llm/model";
import { allowSlowTests, presetModel, tempDir } from "../support";
import { visionPair } from "../support/vision";

allowSlowTests();

const open = (modelsDir: string, paths: string[] = [], aliases?: Record<string, string>, announce?: ModelSource["announce"]) =>
  ModelRegistry.open({ paths, modelsDir, ...(aliases ? { aliases } : {}), ...(announce ? { announce } : {}) });

/** A generated file without Parley's marks: what an operator's real model of that family would be. */
const unmarked = (file: GgufFile): GgufFile => ({
  ...file,
  metadata: Object.fromEntries(Object.entries(file.metadata).filter(([key]) => !key.startsWith("parley."))),
});

describe("the built-in demo model on start-up", () => {
  test("is written once into an empty directory, stamped with its fingerprint, and reused while it matches", async () => {
    const dir = tempDir("demo-reuse");
    const first = await open(dir);
    expect(first.demo).toBe(true);
    expect(first.models.map((model) => [model.id, model.path])).toEqual([["parley-demo", join(dir, "parley-demo.gguf")]]);
    expect(readGgufHeader(first.default.path).metadata[DEMO_FINGERPRINT_KEY]).toEqual({ type: "string", value: demoFingerprint() });

    // Dated back, so that a rewrite, even within the same millisecond, would show in the time.
    const past = new Date("2020-01-01T00:00:00Z");
    utimesSync(first.default.path, past, past);
    const written = statSync(first.default.path);
    await open(dir);
    const again = statSync(first.default.path);
    expect([again.ino, again.mtimeMs]).toEqual([written.ino, written.mtimeMs]);
  });

  test("a damaged or foreign file under the demo's name is replaced", async () => {
    const dir = tempDir("demo-replace");
    const path = join(dir, "parley-demo.gguf");
    writeFileSync(path, "GGUF but not really");
    expect((await open(dir)).demo).toBe(true);
    expect(readGgufHeader(path).metadata[DEMO_FINGERPRINT_KEY]).toEqual({ type: "string", value: demoFingerprint() });
  });
});

describe("the model registry", () => {
  test("named files first (the first the default), then the directory's in name order; a named file that is missing refuses the start", async () => {
    const dir = tempDir("registry");
    copyFileSync(await presetModel("bench-small"), join(dir, "b.gguf"));
    copyFileSync(await presetModel("qwen3-thinking"), join(dir, "a.gguf"));
    // Generated models only: the demo is written into the directory, and is the default.
    const fromDir = await open(dir);
    expect(fromDir.demo).toBe(true);
    expect(fromDir.models.map((model) => model.id)).toEqual(["parley-demo", "parley-qwen3-thinking", "parley-bench-small"]);

    const named = await open(dir, [await presetModel("demo")]);
    expect(named.demo).toBe(false);
    expect(named.models.map((model) => model.path)).toEqual([await presetModel("demo"), join(dir, "a.gguf"), join(dir, "b.gguf")]);
    // A file of the directory named too, by another path to it, is one model.
    const twice = await open(dir, [join(dir, "..", basename(dir), "b.gguf")]);
    expect(twice.models.map((model) => model.id)).toEqual(["parley-bench-small", "parley-qwen3-thinking", "parley-demo"]);
    await expect(open(dir, [join(dir, "missing.gguf")])).rejects.toThrow("PARLEY_MODEL");
  });

  test("a request's model: the default when absent or named parley, by id or alias, else UnknownModel; with one model, any name", async () => {
    const dir = tempDir("resolve");
    copyFileSync(await presetModel("bench-small"), join(dir, "bench.gguf"));
    const one = await open(tempDir("resolve-empty"), [join(dir, "bench.gguf")]);
    expect(one.resolve("gpt-4o-mini").id).toBe("parley-bench-small");

    const two = await open(dir, [await presetModel("demo")], { "gpt-4o-mini": "parley-bench-small" });
    expect(two.resolve(undefined).id).toBe("parley-demo");
    expect(two.resolve("parley").id).toBe("parley-demo");
    expect(two.resolve("parley-bench-small").id).toBe("parley-bench-small");
    expect(two.resolve("gpt-4o-mini").id).toBe("parley-bench-small");
    expect(() => two.resolve("gpt-5")).toThrow(UnknownModel);
    // An alias of that name wins: the operator chose it.
    expect((await open(dir, [await presetModel("demo")], { parley: "parley-bench-small" })).resolve("parley").id).toBe("parley-bench-small");
    await expect(open(dir, [await presetModel("demo")], { x: "nothing" })).rejects.toThrow("PARLEY_MODEL_ALIASES");
    // The demo an earlier start wrote into the directory yields to a named copy of it.
    copyFileSync(await presetModel("demo"), join(dir, "parley-demo.gguf"));
    const both = await open(dir, [await presetModel("demo")]);
    expect(both.models.map((model) => model.path)).toEqual([await presetModel("demo"), join(dir, "bench.gguf")]);
  });

  test("without a named file: every file is served, the demo too; the default, chosen at the start, is the first by name that Parley did not generate", async () => {
    const dir = tempDir("default");
    copyFileSync(await presetModel("bench-small"), join(dir, "a-bench.gguf"));
    copyFileSync(await presetModel("qwen3-thinking"), join(dir, "b-qwen3.gguf"));
    const notices: string[] = [];
    const generatedOnly = await open(dir, [], undefined, (level, _fields, message) => notices.push(`${level}: ${message}`));
    // Generated models (random weights, a family's format) never become the default: the demo is written, and is.
    expect(generatedOnly.demo).toBe(true);
    expect(notices).toEqual(["info: wrote the built-in demo model (generated by Parley, no download)"]);
    expect(generatedOnly.models.map((model) => model.id)).toEqual(["parley-demo", "parley-bench-small", "parley-qwen3-thinking"]);

    // An operator's real model (a family's file without Parley's mark) is the default at the next start.
    await writeGguf(join(dir, "z-real.gguf"), unmarked(familyGguf("llama3")));
    const fresh = await open(dir);
    expect(fresh.demo).toBe(false);
    expect(fresh.models.map((model) => model.id)).toEqual(["parley-llama3", "parley-bench-small", "parley-qwen3-thinking", "parley-demo"]);
    expect(fresh.resolve("parley").id).toBe("parley-llama3");
    expect(fresh.resolve("parley-demo").id).toBe("parley-demo");
    // Files added while serving are served by name; the default chosen at the start stays.
    generatedOnly.rescan();
    expect(generatedOnly.models.map((model) => model.id)).toEqual(["parley-demo", "parley-bench-small", "parley-qwen3-thinking", "parley-llama3"]);
    expect(generatedOnly.resolve("parley").id).toBe("parley-demo");
    expect(generatedOnly.resolve("parley-llama3").id).toBe("parley-llama3");
  });

  test("a corrupt or truncated file or a projector is listed as unusable with its reason and the rest serve; a file added later is found", async () => {
    const dir = tempDir("unusable");
    const bench = await presetModel("bench-small");
    copyFileSync(bench, join(dir, "good.gguf"));
    writeFileSync(join(dir, "corrupt.gguf"), "GGUF but not really");
    writeFileSync(join(dir, "truncated.gguf"), readFileSync(bench).subarray(0, 1024));
    copyFileSync((await visionPair()).projector, join(dir, "projector.gguf"));
    const registry = await open(dir);
    // Random weights are never the default: the demo is written beside them.
    expect(registry.models.map((model) => model.id)).toEqual(["parley-demo", "parley-bench-small"]);
    expect(registry.unusable.map((file) => file.path)).toEqual([join(dir, "corrupt.gguf"), join(dir, "projector.gguf"), join(dir, "truncated.gguf")]);
    for (const file of registry.unusable) expect(file.reason.length).toBeGreaterThan(10);
    expect(registry.unusable[1]!.reason).toStartWith("is a projector (clip), not a model");

    copyFileSync(await presetModel("qwen3-thinking"), join(dir, "later.gguf"));
    registry.rescan();
    expect(registry.resolve("parley-qwen3-thinking").path).toBe(join(dir, "later.gguf"));
  });
});

describe("model ids", () => {
  test("a preset written in another type than its default has the type in its id, as in its file name", async () => {
    const dir = tempDir("typed-ids");
    const quantized = await presetModel("bench-small", "Q4_0");
    copyFileSync(await presetModel("bench-small"), join(dir, "parley-bench-small.gguf"));
    copyFileSync(quantized, join(dir, "parley-bench-small-Q4_0.gguf"));
    const notices: string[] = [];
    const both = await open(dir, [], undefined, (level) => notices.push(level));
    expect(both.models.map((model) => model.id)).toEqual(["parley-demo", "parley-bench-small-Q4_0", "parley-bench-small"]);
    // PARLEY_MODEL naming one type while the directory holds the other.
    const other = tempDir("typed-named");
    copyFileSync(await presetModel("bench-small"), join(other, "parley-bench-small.gguf"));
    expect((await open(other, [quantized])).models.map((model) => model.id)).toEqual(["parley-bench-small-Q4_0", "parley-bench-small"]);
    expect(notices).not.toContain("warn");
  });

  test("two files of one id: the first keeps it, the other is served by its file name, with a warning naming both; never a refused start", async () => {
    const dir = tempDir("clash");
    const bench = await presetModel("bench-small");
    copyFileSync(bench, join(dir, "a.gguf"));
    copyFileSync(bench, join(dir, "b.gguf"));
    const warnings: [object, string][] = [];
    const registry = await open(dir, [], undefined, (level, fields, message) => level === "warn" && warnings.push([fields, message]));
    expect(registry.models.map((model) => [model.id, basename(model.path)])).toEqual([
      ["parley-demo", "parley-demo.gguf"],
      ["parley-bench-small", "a.gguf"],
      ["b", "b.gguf"],
    ]);
    expect(warnings).toEqual([
      [
        { model_path: join(dir, "b.gguf"), id: "b", other_path: join(dir, "a.gguf") },
        `two model files have the id "parley-bench-small": ${join(dir, "a.gguf")} keeps it, ${join(dir, "b.gguf")} is served as "b" (rename one: general.name, else the file name)`,
      ],
    ]);
    expect(registry.unusable).toEqual([]);

    // A named file takes the id first; a directory file of the same id and file name gets a number.
    const named = join(tempDir("clash-named"), "a.gguf");
    copyFileSync(bench, named);
    expect((await open(dir, [named])).models.map((model) => model.id)).toEqual(["parley-bench-small", "a", "b", "parley-demo"]);
    const twin = join(tempDir("clash-twin"), "a.gguf");
    copyFileSync(bench, twin);
    expect((await open(dir, [named, twin])).models.map((model) => model.id)).toEqual(["parley-bench-small", "a", "a-2", "b", "parley-demo"]);

    // An id stays with its file while it is served: a file added later, first by name, does not take it.
    copyFileSync(bench, join(dir, "0-first.gguf"));
    registry.rescan();
    expect(registry.resolve("parley-bench-small").path).toBe(join(dir, "a.gguf"));
    expect(registry.resolve("0-first").path).toBe(join(dir, "0-first.gguf"));
    expect(warnings.at(-1)![1]).toContain(`${join(dir, "0-first.gguf")} is served as "0-first"`);
    expect(warnings).toHaveLength(2);
  });
});

describe("a vision model's projector", () => {
  test("mmproj-<file> beside a model is its projector, else a one-model folder's one mmproj; named with +, a missing one refuses the start", async () => {
    const { dir, model, projector } = await visionPair();
    const beside = await open(dir);
    expect(beside.resolve("parley-vision")).toMatchObject({ path: model, projector });
    // The demo written beside it has none.
    expect(beside.resolve("parley-demo").projector).toBeUndefined();

    const folder = tempDir("vision-folder");
    copyFileSync(model, join(folder, "model-q4.gguf"));
    copyFileSync(projector, join(folder, "mmproj-model-f16.gguf"));
    expect((await open(tempDir("elsewhere"), [join(folder, "model-q4.gguf")])).default).toMatchObject({ projector: join(folder, "mmproj-model-f16.gguf") });

    const other = tempDir("vision-named");
    copyFileSync(projector, join(other, "clip.gguf"));
    const named = await open(tempDir("empty"), [`${model}+${join(other, "clip.gguf")}`]);
    expect(named.default).toMatchObject({ path: model, projector: join(other, "clip.gguf") });
    await expect(open(tempDir("empty"), [`${model}+${join(other, "missing.gguf")}`])).rejects.toThrow("missing.gguf");
  });
});

describe("a model's memory need", () => {
  test("is its weights and every sequence's KV cache; a load the memory cannot hold is refused with the figures", async () => {
    const bench = describeGguf(await presetModel("bench-small"));
    const one = memoryNeed(bench, 1024, 1);
    expect(one).toBeGreaterThan(bench.sizeBytes);
    // The KV cache grows with the context and the sequences alike: a cell is a cell.
    const cells1024 = memoryNeed(bench, 2048, 1) - one;
    expect(cells1024).toBeGreaterThan(0);
    expect(memoryNeed(bench, 1024, 4) - one).toBe(3 * cells1024);
    expect(() => refuseUnlessFits(bench, 1024, 1, "f16", 0, one)).not.toThrow();
    expect(() => refuseUnlessFits(bench, 1024, 1, "f16", 0, one - 1)).toThrow(
      /parley-bench-small needs about \d+ MiB of RAM .* \d+ MiB of memory are available/,
    );
  });

  test("layers offloaded to a GPU take their share of the weights and the KV cache out of RAM", async () => {
    const bench = describeGguf(await presetModel("bench-small"));
    const layers = integer(bench.metadata[`${bench.architecture}.block_count`])!;
    const margin = memoryNeed(bench, 0, 1, "f16", "all");
    const [weights, kv] = [memoryNeed(bench, 0, 1) - margin, memoryNeed(bench, 1024, 1) - memoryNeed(bench, 0, 1)];
    expect(weights).toBe(bench.sizeBytes);
    // Half the blocks: half the cache, and half of the weights but the output layer's share.
    const half = memoryNeed(bench, 1024, 1, "f16", layers / 2) - margin;
    expect(half).toBeCloseTo(weights * (1 - layers / 2 / (layers + 1)) + kv / 2, 0);
    expect(memoryNeed(bench, 1024, 1, "f16", layers + 1)).toBe(margin);
    expect(memoryNeed(bench, 1024, 4, "f16", "all")).toBe(margin);
    expect(() => refuseUnlessFits(bench, 1024, 1, "f16", "all", margin)).not.toThrow();
    expect(() => refuseUnlessFits(bench, 1024, 1, "f16", layers / 2, margin)).toThrow(/needs about \d+ MiB of RAM \(its weights and KV cache not on the GPU\)/);
  });

  test("a vision model's projector counts as its weights: in RAM on the CPU, none of it with every layer on a GPU", async () => {
    const bench = describeGguf(await presetModel("bench-small"));
    const projector = 300 * 2 ** 20;
    expect(memoryNeed(withProjector(bench, projector), 1024, 1) - memoryNeed(bench, 1024, 1)).toBe(projector);
    expect(memoryNeed(withProjector(bench, projector), 1024, 1, "f16", "all")).toBe(memoryNeed(bench, 1024, 1, "f16", "all"));
  });

  test("a quantized KV cache counts ggml's blocks: 34 bytes for 32 values in q8_0, 18 in q4_0", async () => {
    const bench = describeGguf(await presetModel("bench-small"));
    const kv = (type: "f16" | "q8_0" | "q4_0") => memoryNeed(bench, 1024, 4, type) - memoryNeed(bench, 0, 4, type);
    expect(kv("q8_0") / kv("f16")).toBeCloseTo(17 / 32, 6);
    expect(kv("q4_0") / kv("f16")).toBeCloseTo(9 / 32, 6);
  });
});
