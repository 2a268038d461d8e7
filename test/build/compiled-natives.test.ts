/**
 * The fast natives' recipe without compiling anything: where the build is cached, how its progress
 * is read, and the cmake hook that keeps only the chosen CPU variants (run on a stand-in for ggml's
 * CMakeLists that declares variants the way ggml does; configuring it takes well under a second),
 * and the hook that runs every decode on one thread (on a stand-in llama and addon, compiled).
 */
import { describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { parseStep, progressLine } from "../../src/natives/build-progress";
import { nativesRoot } from "../../src/natives/cache";
import { CPU_VARIANTS_HOOK, compiledNativesDir, DECODE_THREAD_HOOK } from "../../src/natives/compiled";
import { findCudaToolkit } from "../../src/natives/cuda-toolkit";
import { NODE_LLAMA_CPP_VERSION } from "../../src/natives/version";
import { allowSlowTests, tempDir } from "../support";

allowSlowTests();

describe("compiled natives", () => {
  test("are cached per node-llama-cpp version and recipe under XDG_CACHE_HOME, apart from the executable's unpacked copies", () => {
    const env = { XDG_CACHE_HOME: "/srv/cache", HOME: "/home/x" };
    const dir = compiledNativesDir("3.22.1", env);
    expect(dir).toMatch(/^\/srv\/cache\/parley\/compiled-natives\/3\.22\.1-[0-9a-f]{16}$/);
    expect(compiledNativesDir("3.22.1", env)).toBe(dir);
    expect(compiledNativesDir("3.23.0", env)).toMatch(/\/3\.23\.0-[0-9a-f]{16}$/);
    // The executable removes every `<version>-<hash>` directory but its own from nativesRoot.
    expect(dirname(dir)).not.toBe(nativesRoot(env));
    expect(compiledNativesDir("3.22.1", { XDG_CACHE_HOME: "relative/cache" })).not.toContain("relative/cache");
  });

  test("the build's steps are read from ninja's and make's status lines", () => {
    expect(parseStep("[17/208] Building CXX object llama.cpp/ggml/src/CMakeFiles/ggml-cpu-haswell.dir/ggml-cpu/ops.cpp.o")).toEqual({
      position: "[17/208]",
      what: "ggml-cpu-haswell ggml-cpu/ops.cpp",
    });
    expect(parseStep("[ 45%] Linking CXX shared library bin/libllama.so")).toEqual({ position: "[45%]", what: "Linking CXX shared library bin/libllama.so" });
    expect(parseStep("-- Adding CPU backend variant ggml-cpu-x64:")).toBeUndefined();
    expect(parseStep("ops.cpp:12: warning: [-Wunused]")).toBeUndefined();
  });

  test("progress is one rewritten line on a terminal and plain lines elsewhere", () => {
    const sink = (isTTY: boolean) => {
      const written: string[] = [];
      return { written, stream: { isTTY, columns: 60, write: (text: string) => written.push(text) } as unknown as NodeJS.WriteStream };
    };
    const step = { position: "[1/2]", what: "ggml-base ggml.c" };
    const plain = sink(false);
    const line = progressLine("natives: compiling", plain.stream);
    line.step(step);
    line.step(step);
    line.end();
    expect(plain.written).toHaveLength(2);
    expect(plain.written[0]).toMatch(/^natives: compiling \[1\/2\] 0:00 ggml-base ggml\.c\n$/);

    const tty = sink(true);
    const redrawn = progressLine("natives: compiling", tty.stream);
    redrawn.step(step);
    redrawn.step({ position: "[2/2]", what: "x".repeat(200) });
    redrawn.end();
    expect(tty.written.slice(0, 2).every((text) => text.startsWith("\r\x1b[2K") && !text.includes("\n"))).toBe(true);
    expect(tty.written[1]!.length).toBeLessThanOrEqual("\r\x1b[2K".length + 59);
    expect(tty.written.at(-1)).toBe("\n");
  });

  describe("the CPU variants hook", () => {
    const cmake = Bun.which("cmake");
    /** A project named ggml whose variants are declared like ggml/src/CMakeLists.txt declares them. */
    const configure = (variants: string) => {
      const root = tempDir("cmake-hook");
      mkdirSync(join(root, "cpu"));
      writeFileSync(
        join(root, "CMakeLists.txt"),
        [
          "cmake_minimum_required(VERSION 3.19)",
          "project(ggml NONE)",
          "add_subdirectory(cpu)",
          "function(ggml_add_cpu_backend_variant tag_name)",
          // biome-ignore lint/suspicious/noTemplateCurlyInString: CMake's variable, not a template
          "  set(GGML_CPU_TAG_NAME ${tag_name})",
          // biome-ignore lint/suspicious/noTemplateCurlyInString: CMake's variable, not a template
          "  ggml_add_cpu_backend_variant_impl(${tag_name})",
          "endfunction()",
          ...["x64", "sse42", "haswell", "skylakex", "zen4", "alderlake"].map((tag) => `ggml_add_cpu_backend_variant(${tag})`),
        ].join("\n"),
      );
      writeFileSync(
        join(root, "cpu", "CMakeLists.txt"),
        // biome-ignore lint/suspicious/noTemplateCurlyInString: CMake's variable, not a template
        'function(ggml_add_cpu_backend_variant_impl tag_name)\n  message(STATUS "added ${tag_name}")\nendfunction()\n',
      );
      const result = Bun.spawnSync([
        cmake!,
        "-S",
        root,
        "-B",
        join(root, "build"),
        `-DCMAKE_PROJECT_ggml_INCLUDE=${CPU_VARIANTS_HOOK}`,
        `-DPARLEY_CPU_VARIANTS=${variants}`,
      ]);
      const output = `${result.stdout}${result.stderr}`;
      return { code: result.exitCode, output, added: [...output.matchAll(/added (\S+)/g)].map((match) => match[1]) };
    };

    test("adds only the variants asked for", () => {
      if (cmake === null) return console.log("skipped: no cmake");
      const { code, added, output } = configure("x64,haswell,zen4");
      expect(code, output).toBe(0);
      expect(added).toEqual(["x64", "haswell", "zen4"]);
    });

    test("fails when a variant is not declared (renamed upstream)", () => {
      if (cmake === null) return console.log("skipped: no cmake");
      const { code, output } = configure("x64,icelake");
      expect(code).not.toBe(0);
      expect(output).toContain("ggml declared no CPU variant 'icelake'");
    });
  });

  describe("the decode-thread hook", () => {
    const [cmake, compiler] = [Bun.which("cmake"), Bun.which("c++")];
    const standIn = join(import.meta.dir, "decode-thread-stand-in");
    /** Per caller thread of the stand-in's probe: its id, the id llama_decode ran on, a failing decode's result. */
    const probe = (hooked: boolean) => {
      const build = join(tempDir("decode-thread"), "build");
      const hook = hooked ? [`-DCMAKE_PROJECT_INCLUDE=${DECODE_THREAD_HOOK}`] : [];
      for (const step of [
        [cmake!, "-S", standIn, "-B", build, "-DCMAKE_BUILD_TYPE=Release", ...hook],
        [cmake!, "--build", build],
      ]) {
        const result = Bun.spawnSync(step);
        expect(result.exitCode, `${result.stdout}${result.stderr}`).toBe(0);
      }
      const out = Bun.spawnSync([join(build, "probe")])
        .stdout.toString()
        .trim();
      return out.split("\n").map((line) => line.split(" ").map(Number) as [number, number, number]);
    };

    test("runs the addon's llama_decode calls from every thread on one other thread, and returns what it throws", () => {
      if (cmake === null || compiler === null) return console.log("skipped: no cmake or c++");
      const calls = probe(true);
      expect(calls).toHaveLength(3);
      const ranOn = new Set(calls.map(([, ran]) => ran));
      expect(ranOn.size).toBe(1);
      for (const [caller, ran, failed] of calls) {
        expect(ran).not.toBe(caller);
        expect(failed).toBe(-1);
      }
    }, 60_000);

    /**
     * Configures (only) a stand-in of node-llama-cpp's addon project with the hook: the package's
     * version in `../package.json`, `classes` defined as the addon's sources define them, and
     * (unless `mtmd` is false) llama.cpp's mtmd sources and the vendored libraries they use.
     */
    const configure = (version: string, classes: { context: string; sampler: string }, mtmd = true) => {
      const root = tempDir("addon-checks");
      const vendored = ["hash", "miniaudio", "stb", "sheredom"].map((name) => `add_library(vendor::${name} INTERFACE IMPORTED)\n`).join("");
      const mtmdSources = ["mtmd", "mtmd-audio", "mtmd-image", "mtmd-helper", "mtmd-helper-gen", "clip", "models/llava"];
      const files: Record<string, string> = {
        "package.json": JSON.stringify({ name: "node-llama-cpp", version }),
        "llama/CMakeLists.txt": `cmake_minimum_required(VERSION 3.19)\nproject("llama-addon" CXX)\n${vendored}add_library(llama-addon SHARED addon/AddonContext.cpp)\n`,
        "llama/addon/AddonContext.h": "",
        "llama/addon/AddonContext.cpp": `void init() { DefineClass(\n  env,\n  "${classes.context}", {}); }\n`,
        "llama/addon/AddonSampler.cpp": `void init() { DefineClass(env, "${classes.sampler}", {}); }\n`,
        ...(mtmd ? Object.fromEntries(mtmdSources.map((name) => [`llama/llama.cpp/tools/mtmd/${name}.cpp`, ""])) : {}),
      };
      for (const [name, text] of Object.entries(files)) {
        mkdirSync(dirname(join(root, name)), { recursive: true });
        writeFileSync(join(root, name), text);
      }
      const step = [
        cmake!,
        "-S",
        join(root, "llama"),
        "-B",
        join(root, "build"),
        `-DCMAKE_PROJECT_INCLUDE=${DECODE_THREAD_HOOK}`,
        `-DPARLEY_NODE_LLAMA_CPP_VERSION=${NODE_LLAMA_CPP_VERSION}`,
      ];
      const result = Bun.spawnSync(step);
      // CMake wraps its messages' lines.
      return { code: result.exitCode, output: `${result.stdout}${result.stderr}`.replace(/\s+/g, " ") };
    };

    test("refuses to configure the addon of another node-llama-cpp, one whose classes were renamed, or one without mtmd's sources", () => {
      if (cmake === null || compiler === null) return console.log("skipped: no cmake or c++");
      const classes = { context: "AddonContext", sampler: "AddonSampler" };
      expect(configure(NODE_LLAMA_CPP_VERSION, classes).code).toBe(0);
      const otherVersion = configure("3.99.0", classes);
      expect(otherVersion.code).not.toBe(0);
      expect(otherVersion.output).toContain(`written for node-llama-cpp '${NODE_LLAMA_CPP_VERSION}', this addon is of '3.99.0'`);
      const renamed = configure(NODE_LLAMA_CPP_VERSION, { ...classes, sampler: "AddonSamplerV2" });
      expect(renamed.code).not.toBe(0);
      expect(renamed.output).toContain('no longer defines the class "AddonSampler"');
      const withoutMtmd = configure(NODE_LLAMA_CPP_VERSION, classes, false);
      expect(withoutMtmd.code).not.toBe(0);
      expect(withoutMtmd.output).toContain("has no mtmd sources that src/natives/vision.cpp needs");
    }, 60_000);

    test("without it, each call runs on its caller's thread (what the hook changes)", () => {
      if (cmake === null || compiler === null) return console.log("skipped: no cmake or c++");
      for (const [caller, ran, failed] of probe(false)) {
        expect(ran).toBe(caller);
        expect(failed).toBe(-1);
      }
    }, 60_000);
  });
});

describe("the CUDA toolkit the CUDA natives compile with", () => {
  /** A stand-in toolkit holding `files` (empty files are enough: only their presence is read). */
  const toolkit = (...files: string[]) => {
    const local = tempDir("cuda-local");
    for (const file of files) {
      mkdirSync(dirname(join(local, "cuda-13.0", file)), { recursive: true });
      writeFileSync(join(local, "cuda-13.0", file), "");
    }
    return local;
  };
  const complete = ["bin/nvcc", "include/cublas_v2.h", "lib64/libcublas.so"];

  test("is CUDA_PATH, else /usr/local/cuda, else the newest /usr/local/cuda-<version>; VMM needs the driver's stub", () => {
    const local = toolkit(...complete);
    expect(findCudaToolkit({}, local, "/nowhere")).toEqual({ root: join(local, "cuda-13.0"), nvcc: join(local, "cuda-13.0/bin/nvcc"), driverStub: false });
    expect(findCudaToolkit({ CUDA_PATH: join(local, "cuda-13.0") }, "/nowhere").root).toBe(join(local, "cuda-13.0"));
    expect(findCudaToolkit({}, toolkit(...complete, "lib64/stubs/libcuda.so"), "/nowhere").driverStub).toBe(true);
  });

  test("without nvcc or cuBLAS it names what is missing, before any compile", () => {
    expect(() => findCudaToolkit({}, toolkit("include/cublas_v2.h"))).toThrow(/need CUDA's compiler: no bin\/nvcc in .*set CUDA_PATH/);
    expect(() => findCudaToolkit({}, toolkit("bin/nvcc", "include/cublas_v2.h"))).toThrow(/need cuBLAS .*lib64\/libcublas\.so missing/);
  });
});
