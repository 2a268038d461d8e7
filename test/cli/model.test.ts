import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describeGguf, InvalidModelError } from "../../src/gguf/describe";
import { writePresetModel } from "../../src/gguf/presets";
import { fromFloats } from "../../src/gguf/tensor-data";
import { type GgufValue, gguf } from "../../src/gguf/values";
import { writeGguf } from "../../src/gguf/writer";
import { allowSlowTests, until } from "../support";

allowSlowTests();

const dir = mkdtempSync(join(tmpdir(), "parley-model-cli-"));
const modelsDir = join(dir, "models");
const env = { ...Bun.env, PARLEY_MODELS_DIR: modelsDir };

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Spawned asynchronously: the pull tests' HTTP server runs in this process and must keep answering. */
function start(...args: string[]) {
  return Bun.spawn(["bun", "src/cli.ts", "model", ...args], { env, stdout: "pipe", stderr: "pipe" });
}

async function finish(proc: ReturnType<typeof start>): Promise<Run> {
  const [code, stdout, stderr] = await Promise.all([proc.exited, new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
  return { code, stdout, stderr };
}

const parley = (...args: string[]) => finish(start(...args));

/** A failure is reported as one line naming the file, never a stack trace. */
function expectOneLineFailure(run: Run, reason: RegExp): void {
  expect(run.code).toBe(1);
  expect(run.stderr.trim().split("\n")).toHaveLength(1);
  expect(run.stderr).toMatch(reason);
  expect(run.stderr).not.toContain("    at ");
}

const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

const demoPath = join(modelsDir, "parley-demo.gguf");
const sources = join(dir, "sources");
// node-llama-cpp's downloader (ipull) records progress per 5 MiB chunk, so a download can only
// resume from a point past 5 MiB: the resume source is 8 MiB of tensor data, the demo is 3 MB.
const bigPath = join(sources, "big.gguf");
const CHUNK = 5 * 1024 * 1024;

async function writeBigGguf(path: string): Promise<void> {
  const values = Float32Array.from({ length: 2 * 1024 * 1024 }, (_, i) => Math.sin(i));
  await writeGguf(path, {
    metadata: { "general.architecture": gguf.string("llama"), "general.name": gguf.string("resume-test"), "llama.context_length": gguf.u32(256) },
    tensors: [{ name: "w.weight", type: "F32", shape: [1024, 2048], data: fromFloats(values, "F32") }],
  });
}

beforeAll(async () => {
  mkdirSync(sources, { recursive: true });
  await writePresetModel("demo", demoPath);
  const demo = readFileSync(demoPath);
  writeFileSync(join(modelsDir, "truncated.gguf"), demo.subarray(0, demo.length >> 1));
  writeFileSync(join(modelsDir, "notes.gguf"), "these are notes, not a model\n");
  writeFileSync(join(sources, "page.gguf"), "<!DOCTYPE html><html><body>Sign in</body></html>\n");
  await writeBigGguf(bigPath);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("describeGguf", () => {
  const reason = (path: string): string => {
    try {
      describeGguf(path);
    } catch (err) {
      if (err instanceof InvalidModelError) return err.reason;
      throw err;
    }
    throw new Error(`${path} was accepted`);
  };

  /** One 256 x 2 tensor written as F32, then relabelled as `typeId` with `general.file_type` as given. */
  async function retyped(name: string, typeId: number, fileType?: number): Promise<{ path: string; bytes: Buffer; dataOffset: number }> {
    const path = join(dir, name);
    await writeGguf(path, {
      metadata: { "general.architecture": gguf.string("llama"), ...(fileType === undefined ? {} : { "general.file_type": gguf.u32(fileType) }) },
      tensors: [{ name: "q.weight", type: "F32", shape: [256, 2], data: fromFloats(new Float32Array(512), "F32") }],
    });
    const bytes = readFileSync(path);
    const typeAt = bytes.indexOf("q.weight") + "q.weight".length + 4 + 2 * 8; // after n_dims and both dims
    bytes.writeUInt32LE(typeId, typeAt);
    writeFileSync(path, bytes);
    const dataOffset = bytes.length - 512 * 4;
    return { path, bytes, dataOffset };
  }

  test("checks the data extent with the ggml type's block layout", async () => {
    // Q4_K: blocks of 256 values in 144 bytes, so two rows need 288 bytes of the 2048 written.
    const { path, bytes, dataOffset } = await retyped("q4k.gguf", 12);
    expect(describeGguf(path)).toMatchObject({ quantization: "Q4_K", parameters: 512, tensors: 1, name: "q4k" });
    writeFileSync(path, bytes.subarray(0, dataOffset + 288));
    expect(describeGguf(path).sizeBytes).toBe(dataOffset + 288);
    writeFileSync(path, bytes.subarray(0, dataOffset + 287));
    expect(reason(path)).toBe(
      `is truncated: its tensor data ends at byte ${dataOffset + 288} but the file has only ${dataOffset + 287} bytes (an interrupted download or copy?)`,
    );
  });

  test("names general.file_type as llama-quantize does, and skips the size check for unknown types", async () => {
    expect(describeGguf((await retyped("q4km.gguf", 12, 15)).path).quantization).toBe("Q4_K_M");
    expect(describeGguf((await retyped("f16.gguf", 1, 1)).path).quantization).toBe("F16");
    const unknown = await retyped("unknown.gguf", 99);
    writeFileSync(unknown.path, unknown.bytes.subarray(0, unknown.dataOffset + 1));
    expect(describeGguf(unknown.path).quantization).toBe("type 99");
  });

  test("refuses what llama.cpp could not load, each with its own reason", async () => {
    const demo = readFileSync(demoPath);
    const write = (name: string, bytes: Uint8Array) => {
      writeFileSync(join(dir, name), bytes);
      return join(dir, name);
    };
    const v1 = Buffer.from(demo.subarray(0, 64));
    v1.writeUInt32LE(1, 4);
    const badRow = await retyped("badrow.gguf", 8); // Q8_0 blocks hold 32 values: 256 fits
    const row = Buffer.from(badRow.bytes);
    row.writeBigUInt64LE(100n, row.indexOf("q.weight") + "q.weight".length + 4);
    expect(reason(dir)).toBe("is a directory, not a GGUF file");
    expect(reason(write("empty.gguf", new Uint8Array()))).toBe("is empty (0 bytes)");
    expect(reason(write("elf.gguf", new Uint8Array([0x7f, 0x45, 0x4c, 0x46, 2, 1])))).toBe('is not a GGUF file (it starts with 0x7f454c46, not "GGUF")');
    expect(reason(write("v1.gguf", v1))).toBe("uses GGUF version 1; only versions 2 and 3 are supported");
    expect(reason(write("header-cut.gguf", demo.subarray(0, 12)))).toBe("is truncated: the file ends inside its GGUF header, at byte 8");
    expect(reason(write("counts-cut.gguf", demo.subarray(0, 100)))).toMatch(
      /^is truncated or has a corrupt GGUF header \(a length of \d+ at byte \d+ runs past the end of the file\)$/,
    );
    expect(reason(write("badrow2.gguf", row))).toMatch(
      /^has a corrupt GGUF header \(tensor q\.weight has rows of 100 Q8_0 values, not a multiple of its block size 32\)$/,
    );

    const metadataOnly = async (name: string, splitCount?: number) => {
      const path = join(dir, name);
      const metadata: Record<string, GgufValue> = { "general.architecture": gguf.string("llama") };
      if (splitCount !== undefined) metadata["split.count"] = gguf.u16(splitCount);
      await writeGguf(path, { metadata, tensors: [] });
      return path;
    };
    expect(reason(await metadataOnly("vocab.gguf"))).toBe("holds no tensors, so it is not a model (a vocabulary-only file?)");
    expect(describeGguf(await metadataOnly("split-00001-of-00003.gguf", 3))).toMatchObject({ tensors: 0, quantization: "unknown" });
  });
});

describe("parley model list / info", () => {
  test("list shows each model's header facts and each broken file's reason", async () => {
    const run = await parley("list");
    expect(run.code).toBe(0);
    const line = (file: string) => run.stdout.split("\n").find((l) => l.startsWith(file)) ?? "";
    expect(run.stdout.split("\n")[0]!.split(/\s+/)).toEqual(["FILE", "ID", "ARCH", "PARAMS", "SIZE", "CONTEXT", "QUANT", "TEMPLATE"]);
    expect(line("parley-demo.gguf").split(/\s+/)).toEqual(["parley-demo.gguf", "parley-demo", "llama", "1.2M", "4.8", "MB", "4096", "F32", "yes"]);
    expect(line("truncated.gguf")).toMatch(/unusable: is truncated: its tensor data ends at byte \d+ but the file has only \d+ bytes/);
    expect(line("notes.gguf")).toContain('unusable: is not a GGUF file (it starts with "thes", not "GGUF")');
  });

  test("info describes a model found by bare name in the models directory", async () => {
    const run = await parley("info", "parley-demo.gguf");
    expect(run.code).toBe(0);
    expect(run.stdout).toContain(`file             ${demoPath}`);
    expect(run.stdout).toMatch(/^quantization +F32$/m);
    expect(run.stdout).toMatch(/^context length +4096$/m);
    expect(run.stdout).toMatch(/^chat template +yes/m);
  });

  test("info on a truncated, non-GGUF or missing file exits 1 with a one-line reason", async () => {
    const [truncated, notes, missing] = await Promise.all([
      parley("info", "truncated.gguf"),
      parley("info", join(modelsDir, "notes.gguf")),
      parley("info", join(dir, "absent.gguf")),
    ]);
    expectOneLineFailure(truncated, /truncated\.gguf: is truncated: its tensor data ends at byte/);
    expectOneLineFailure(notes, /notes\.gguf: is not a GGUF file/);
    expectOneLineFailure(missing, /absent\.gguf: no such file/);
  });

  test("info describes a projector as a projector, from its header alone", async () => {
    const visionDir = join(dir, "vision");
    expect((await parley("demo", "--preset", "vision", "--models-dir", visionDir)).code).toBe(0);
    const run = await parley("info", join(visionDir, "mmproj-parley-vision.gguf"));
    expect([run.code, run.stderr]).toEqual([0, ""]);
    expect(run.stdout).toMatch(/^architecture +clip$/m);
    expect(run.stdout).toMatch(/^kind +projector \(mmproj\)/m);
    expect(run.stdout).toMatch(/^projector type +mlp$/m);
    expect(run.stdout).toMatch(/^image size +32×32 pixels in 8×8 patches$/m);
    expect(run.stdout).toMatch(/^output width +256 /m);
    expect(run.stdout).not.toMatch(/^(chat template|chat format|context length)/m);
  });

  test("info says an embedding or reranking model is one, with no chat format", async () => {
    const retrievalDir = join(dir, "retrieval");
    for (const preset of ["embed", "rerank"] as const) await writePresetModel(preset, join(retrievalDir, `${preset}.gguf`));
    const [embed, rerank] = await Promise.all([parley("info", join(retrievalDir, "embed.gguf")), parley("info", join(retrievalDir, "rerank.gguf"))]);
    for (const run of [embed, rerank]) {
      expect([run.code, run.stderr]).toEqual([0, ""]);
      expect(run.stdout).toMatch(/^chat template +none$/m);
      expect(run.stdout).not.toContain("chat format ");
      expect(run.stdout).not.toContain("equivalent to the template");
    }
    expect(embed.stdout).toMatch(/^kind +embedding model: .*it has no chat format$/m);
    expect(rerank.stdout).toMatch(/^kind +reranking model: .*it has no chat format$/m);
  });

  test("info on a model llama.cpp cannot read exits 1 with one line naming the file and llama.cpp's reason", async () => {
    const path = join(dir, "unknown-arch.gguf");
    await writeGguf(path, {
      metadata: { "general.architecture": gguf.string("nosuch") },
      tensors: [{ name: "w.weight", type: "F32", shape: [32, 2], data: fromFloats(new Float32Array(64), "F32") }],
    });
    const run = await parley("info", path);
    expectOneLineFailure(run, /unknown-arch\.gguf: llama\.cpp cannot read its vocabulary, so it cannot be served: unknown model architecture: 'nosuch'$/m);
    expect(run.stdout).toMatch(/^architecture +nosuch$/m);
  });

  test("list gives each file the id the service gives it, and names both files of a shared id", async () => {
    const listDir = join(dir, "ids");
    for (const type of ["f16", "q4_0"]) expect((await parley("demo", "--preset", "bench-small", "--type", type, "--models-dir", listDir)).code).toBe(0);
    writeFileSync(join(listDir, "b-copy.gguf"), readFileSync(join(listDir, "parley-bench-small.gguf")));
    const run = await parley("list", "--models-dir", listDir);
    expect(run.code).toBe(0);
    const ids = run.stdout
      .split("\n")
      .slice(1)
      .filter((line) => /^\S+\.gguf /.test(line))
      .map((line) => line.split(/\s+/).slice(0, 2));
    // In file name order: the copy comes first and keeps the id; the preset's own file name is that id too, so it gets a number.
    expect(ids).toEqual([
      ["b-copy.gguf", "parley-bench-small"],
      ["parley-bench-small-Q4_0.gguf", "parley-bench-small-Q4_0"],
      ["parley-bench-small.gguf", "parley-bench-small-2"],
    ]);
    expect(run.stdout).toContain(
      'warning: parley-bench-small.gguf is served as "parley-bench-small-2": its model id "parley-bench-small" is b-copy.gguf\'s (rename one: general.name, else the file name)',
    );
  });

  test("usage errors exit 2; --help exits 0", async () => {
    const [noFile, badUri, foreignFlag, help] = await Promise.all([
      parley("info"),
      parley("pull", "ftp://example.com/m.gguf"),
      parley("list", "--preset", "demo"),
      parley("pull", "--help"),
    ]);
    for (const run of [noFile, badUri, foreignFlag]) {
      expect(run.code).toBe(2);
      expect(run.stderr).toContain("usage: parley model");
    }
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("usage: parley model pull <url | hf-uri>");
    expect(help.stdout).toContain("needs a network");
    const demoHelp = await parley("demo", "--help");
    expect(demoHelp.stdout).toContain("parley-vision takes pictures");
    expect(demoHelp.stdout).not.toContain("does not take images");
  });
});

describe("parley model demo", () => {
  test("--type writes bench-small quantized under llama.cpp's kind of name; the demo is f32 only", async () => {
    const quantDir = join(dir, "quantized");
    const written = await parley("demo", "--preset", "bench-small", "--type", "Q4_0", "--models-dir", quantDir);
    expect(written.code, written.stderr).toBe(0);
    const path = join(quantDir, "parley-bench-small-Q4_0.gguf");
    expect(written.stdout).toContain(`Wrote the bench-small model (Q4_0) to ${path}`);
    expect(describeGguf(path)).toMatchObject({ quantization: "Q4_0", name: "parley-bench-small-Q4_0" });

    const [demoQuantized, unknownType] = await Promise.all([
      parley("demo", "--type", "q8_0", "--out", join(quantDir, "never.gguf")),
      parley("demo", "--preset", "bench-small", "--type", "q4_k_m", "--out", join(quantDir, "never.gguf")),
    ]);
    expect(demoQuantized.code).toBe(2);
    expect(demoQuantized.stderr).toContain('the demo model is written as f32, not "q8_0"');
    expect(unknownType.code).toBe(2);
    expect(unknownType.stderr).toContain('the bench-small model is written as f16, q8_0, q4_0, not "q4_k_m"');
    expect(existsSync(join(quantDir, "never.gguf"))).toBe(false);
  });
});

describe("parley model pull", () => {
  const requests: { path: string; range: string | null; bytes: number }[] = [];
  /** While set, ranged requests past the start send 1 KiB and then nothing: a stalled download. */
  let stallAfterStart = false;

  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request) {
      const { pathname } = new URL(request.url);
      const file = Bun.file(join(sources, pathname.slice(1)));
      if (!(await file.exists())) return new Response("not found", { status: 404 });
      const body = await file.bytes();
      const range = request.headers.get("range");
      const headers = { "accept-ranges": "bytes", "content-type": "application/octet-stream" };
      const match = range === null ? null : /^bytes=(\d+)-(\d*)$/.exec(range);
      if (match === null) {
        requests.push({ path: pathname, range, bytes: body.length });
        return new Response(request.method === "HEAD" ? null : body, { headers: { ...headers, "content-length": String(body.length) } });
      }
      const from = Number(match[1]);
      const to = match[2] ? Math.min(Number(match[2]) + 1, body.length) : body.length;
      requests.push({ path: pathname, range, bytes: to - from });
      const rangeHeaders = { ...headers, "content-range": `bytes ${from}-${to - 1}/${body.length}`, "content-length": String(to - from) };
      if (stallAfterStart && from > 0) {
        const stalled = new ReadableStream({
          start: (controller) => controller.enqueue(body.subarray(from, from + 1024)),
          pull: () => new Promise(() => {}),
        });
        return new Response(stalled, { status: 206, headers: rangeHeaders });
      }
      return new Response(body.subarray(from, to), { status: 206, headers: rangeHeaders });
    },
  });
  afterAll(() => server.stop(true));
  const url = (name: string) => `http://127.0.0.1:${server.port}/${name}`;

  test("pulls a model into --out and validates it", async () => {
    writeFileSync(join(sources, "demo.gguf"), readFileSync(demoPath));
    const out = join(dir, "pulled");
    const run = await parley("pull", url("demo.gguf"), "--out", out);
    expect(run.code).toBe(0);
    expect(run.stderr).toContain(`Downloading ${url("demo.gguf")}`);
    expect(run.stderr).toMatch(/^100% 4\.8 MB \/ 4\.8 MB/m);
    expect(run.stdout).toContain("parley-demo (llama, F32, 4.8 MB)");
    expect(sha256(join(out, "demo.gguf"))).toBe(sha256(demoPath));
  });

  test("a download that is not a GGUF model is reported and removed", async () => {
    const out = join(dir, "rejected", "model.gguf");
    const run = await parley("pull", url("page.gguf"), "--out", out);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^parley model pull: \S+model\.gguf: is not a GGUF file \(it starts with "<!DO", not "GGUF"\); the download was removed$/m);
    expect(run.stderr).not.toContain("    at ");
    expect(existsSync(out)).toBe(false);
  });

  test("an interrupted pull resumes from where it stopped", async () => {
    const out = join(dir, "resumed");
    const size = statSync(bigPath).size;
    stallAfterStart = true;
    requests.length = 0;
    const first = start("pull", url("big.gguf"), "--out", out);
    // The downloader appends its progress record to the partial file once a chunk is complete.
    const progressSaved = () => existsSync(out) && readdirSync(out).some((name) => statSync(join(out, name)).size > size);
    await until(progressSaved, "the first attempt to complete a chunk").catch(async () => {
      first.kill("SIGKILL");
      throw new Error(`the first attempt never completed a chunk: ${(await finish(first)).stderr}`);
    });
    first.kill("SIGTERM");
    const interrupted = await finish(first);
    expect(interrupted.code).toBe(1);
    expect(interrupted.stderr).toContain("interrupted; the partial download is kept");
    expect(existsSync(join(out, "big.gguf"))).toBe(false);

    stallAfterStart = false;
    requests.length = 0;
    const second = await parley("pull", url("big.gguf"), "--out", out);
    expect(second.code).toBe(0);
    expect(second.stderr).toContain(`resuming at ${(CHUNK / 1e6).toFixed(1)} MB`);
    const ranged = requests.filter((r) => r.range !== null);
    expect(ranged.length).toBeGreaterThan(0);
    for (const r of ranged) expect(Number(/^bytes=(\d+)-/.exec(r.range!)?.[1])).toBeGreaterThan(0);
    expect(ranged.reduce((n, r) => n + r.bytes, 0)).toBe(size - CHUNK);
    expect(sha256(join(out, "big.gguf"))).toBe(sha256(bigPath));
    expect(describeGguf(join(out, "big.gguf")).name).toBe("resume-test");
  });
});
