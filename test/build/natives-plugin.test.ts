/**
 * The natives plugin must fail the build loudly when node-llama-cpp changes under it. Runs the
 * plugin over a fake node-llama-cpp laid out like the real one (fast: no compile, no natives).
 */
import { describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { type PackedNatives, packNatives } from "../../src/natives/embed-pack";
import { nativesPlugin } from "../../src/natives/embed-plugin";
import { NODE_LLAMA_CPP_VERSION } from "../../src/natives/version";
import { tempDir } from "../support";

const FILES = {
  "dist/bindings/utils/binariesGithubRelease.js":
    "const binariesGithubRelease = await fs.readJson(binariesGithubReleasePath);\nexport const release = binariesGithubRelease.release;",
  "dist/utils/getModuleVersion.js":
    'export async function getModuleVersion() { return (await fs.readJson(path.join(__dirname, "..", "..", "package.json"))).version; }',
  "dist/bindings/utils/testBindingBinary.js":
    "export async function testBindingBinary(bindingBinaryPath, extBackendsPath, gpu, testTimeout = 1000 * 60 * 5, pipeOutputOnNode = false) { return false; }",
} as const;

/** A fake node-llama-cpp with `overrides` applied, bundled through the plugin. */
async function bundle(
  overrides: { version?: string; files?: Partial<Record<keyof typeof FILES, string | null>>; folders?: string[]; natives?: PackedNatives } = {},
) {
  const root = tempDir("plugin");
  const packageDir = join(root, "node_modules/node-llama-cpp");
  const write = (path: string, text: string) => {
    mkdirSync(dirname(join(packageDir, path)), { recursive: true });
    writeFileSync(join(packageDir, path), text);
  };
  write(
    "package.json",
    JSON.stringify({ name: "node-llama-cpp", version: overrides.version ?? NODE_LLAMA_CPP_VERSION, type: "module", main: "dist/index.js" }),
  );
  write("llama/binariesGithubRelease.json", '{ "release": "b1234" }');
  const files = { ...FILES, ...overrides.files };
  const present = Object.entries(files).filter(([, text]) => text !== null) as [string, string][];
  for (const [path, text] of present) write(path, text);
  write(
    "dist/index.js",
    present.map(([path], i) => `export * as m${i} from "./${path.slice("dist/".length)}";`).join("\n") +
      '\nexport const cpu = () => import("@node-llama-cpp/linux-x64");\nexport const cuda = () => import("@node-llama-cpp/linux-x64-cuda");',
  );
  writeFileSync(join(root, "entry.js"), 'export * from "node-llama-cpp";');
  writeFileSync(join(root, "natives.tar.zst"), "");

  const plugin = () =>
    nativesPlugin({
      natives: overrides.natives ?? {
        archive: join(root, "natives.tar.zst"),
        id: "x",
        folders: overrides.folders ?? ["linux-x64"],
        files: 0,
        bytes: 0,
        requires: { glibc: "", glibcxx: "" },
      },
      packageDir,
      cacheModule: join(import.meta.dir, "../../src/natives/cache.ts"),
    });
  // An absolute public path: the embedded archive is then found from any working directory.
  const out = join(root, "out");
  const result = await Bun.build({
    entrypoints: [join(root, "entry.js")],
    target: "bun",
    outdir: out,
    publicPath: `${out}/`,
    plugins: [plugin()],
    throw: false,
  });
  return { result, output: join(root, "out", "entry.js"), errors: result.logs.map(String).join("\n") };
}

describe("natives plugin", () => {
  test("patches the three files and replaces the binaries packages", async () => {
    const { result, output } = await bundle();
    expect(result.success).toBe(true);
    // The fake files would throw (no `fs` in scope) wherever a patch did not apply.
    const bundled = await import(output);
    expect(bundled.m0.release).toBe("b1234");
    expect(await bundled.m1.getModuleVersion()).toBe(NODE_LLAMA_CPP_VERSION);
    expect(await bundled.m2.testBindingBinary("/nowhere/llama-addon.node")).toBe(true);
    expect(String((await bundled.cpu()).getBinsDir)).toContain("installNatives");
  });

  test("without the CUDA natives embedded, the CUDA package finds a CUDA build placed beside the unpacked natives", async () => {
    const root = tempDir("plugin-natives");
    mkdirSync(join(root, "bins/linux-x64"), { recursive: true });
    writeFileSync(join(root, "bins/linux-x64/llama-addon.node"), "not really an addon");
    const natives = await packNatives(join(root, "bins"), ["linux-x64"], NODE_LLAMA_CPP_VERSION, join(root, "cache"));
    const { result, output } = await bundle({ natives });
    expect(result.success).toBe(true);
    const bundled = await import(output);
    const previous = Bun.env.PARLEY_NATIVES_DIR;
    Bun.env.PARLEY_NATIVES_DIR = join(root, "unpacked");
    try {
      expect((await bundled.cuda()).getBinsDir()).toEqual({});
      const { binsDir } = (await bundled.cpu()).getBinsDir();
      expect(binsDir).toBe(join(root, "unpacked", natives.id));
      mkdirSync(join(binsDir, "linux-x64-cuda"));
      writeFileSync(join(binsDir, "linux-x64-cuda/llama-addon.node"), "");
      expect((await bundled.cuda()).getBinsDir()).toEqual({ binsDir, packageVersion: NODE_LLAMA_CPP_VERSION });
    } finally {
      if (previous === undefined) delete Bun.env.PARLEY_NATIVES_DIR;
      else Bun.env.PARLEY_NATIVES_DIR = previous;
    }
  });

  test("with the CUDA natives embedded, the CUDA package unpacks the same directory", async () => {
    const { result, output } = await bundle({ folders: ["linux-x64", "linux-x64-cuda"] });
    expect(result.success).toBe(true);
    const bundled = await import(output);
    const body = async (module: Promise<{ getBinsDir(): unknown }>) => String((await module).getBinsDir).replace(/^function \w+/, "");
    expect(await body(bundled.cuda())).toBe(await body(bundled.cpu()));
    expect(await body(bundled.cuda())).toContain("installNatives");
  });

  test("another node-llama-cpp version fails the build", async () => {
    await expect(bundle({ version: "3.23.0" })).rejects.toThrow(/written for node-llama-cpp 3\.22\.1, found 3\.23\.0/);
  });

  test("a patch whose text is gone fails the build", async () => {
    const { result, errors } = await bundle({
      files: { "dist/utils/getModuleVersion.js": "export async function getModuleVersion() { return readVersion(); }" },
    });
    expect(result.success).toBe(false);
    expect(errors).toContain("getModuleVersion.js, found it 0 times");
  });

  test("a patched file that is no longer bundled fails the build", async () => {
    const { errors } = await bundle({ files: { "dist/bindings/utils/testBindingBinary.js": null } }).catch((err: Error) => ({ errors: err.message }));
    expect(errors).toContain("never saw the file to patch for");
    expect(errors).toContain("testBindingBinary");
  });
});
