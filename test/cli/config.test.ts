import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { ConfigError, loadConfig } from "../../src/config";
import { tempDir } from "../support";

describe("PARLEY_DATA_DIR", () => {
  test("defaults to the database file's directory; the flag wins over the variable", () => {
    expect(loadConfig({ PARLEY_DB: "/srv/parley/db/parley.db" }).dataDir).toBe("/srv/parley/db");
    expect(loadConfig({ PARLEY_DB: "/srv/db/parley.db", PARLEY_DATA_DIR: "/srv/state" }).dataDir).toBe("/srv/state");
    expect(loadConfig({ PARLEY_DATA_DIR: "/srv/state" }, new Map([["--data-dir", "/srv/other"]])).dataDir).toBe("/srv/other");
  });

  test("a file or a blank value stops start-up with a message naming the setting", async () => {
    const file = join(tempDir("config"), "a-file");
    await Bun.write(file, "");
    expect(() => loadConfig({ PARLEY_DATA_DIR: file })).toThrow(
      new ConfigError(`PARLEY_DATA_DIR must name a directory, existing or to be created (got "${file}")`),
    );
    expect(() => loadConfig({}, new Map([["--data-dir", " "]]))).toThrow(/^--data-dir must name a directory/);
  });
});

describe("PARLEY_SYSTEM_PROMPT", () => {
  test("is the text itself, or @path read at start; unset means none", async () => {
    expect(loadConfig({}).systemPrompt).toBeUndefined();
    expect(loadConfig({ PARLEY_SYSTEM_PROMPT: "You are a pirate." }).systemPrompt).toBe("You are a pirate.");
    const file = join(tempDir("config"), "persona.txt");
    await Bun.write(file, "You are terse.\n");
    expect(loadConfig({ PARLEY_SYSTEM_PROMPT: `@${file}` }).systemPrompt).toBe("You are terse.");
    expect(loadConfig({}, new Map([["--system-prompt", `@${file}`]])).systemPrompt).toBe("You are terse.");
  });

  test("a missing or empty file stops start-up with a message naming the setting", async () => {
    const dir = tempDir("config");
    expect(() => loadConfig({ PARLEY_SYSTEM_PROMPT: `@${dir}/missing.txt` })).toThrow(
      new ConfigError(`PARLEY_SYSTEM_PROMPT names a file that cannot be read: ${dir}/missing.txt (ENOENT)`),
    );
    await Bun.write(join(dir, "blank.txt"), "  \n");
    expect(() => loadConfig({}, new Map([["--system-prompt", `@${dir}/blank.txt`]]))).toThrow(/^--system-prompt names an empty file/);
  });
});

describe("PARLEY_REASONING", () => {
  test("separate by default; hide or inline when chosen, the flag winning; anything else stops start-up", () => {
    expect(loadConfig({}).reasoning).toBe("separate");
    expect(loadConfig({ PARLEY_REASONING: "hide" }).reasoning).toBe("hide");
    expect(loadConfig({ PARLEY_REASONING: "hide" }, new Map([["--reasoning", "inline"]])).reasoning).toBe("inline");
    expect(() => loadConfig({ PARLEY_REASONING: "shown" })).toThrow(new ConfigError(`PARLEY_REASONING must be one of separate, hide, inline (got "shown")`));
  });
});

describe("several models", () => {
  test("PARLEY_MODEL is a list; aliases are name=id pairs; keep-alive takes -1 (never) to a month", () => {
    expect(loadConfig({ PARLEY_MODEL: " a.gguf, b.gguf ," }).modelPaths).toEqual(["a.gguf", "b.gguf"]);
    expect(loadConfig({}).modelPaths).toEqual([]);
    expect(loadConfig({ PARLEY_MODEL_ALIASES: "gpt-4o-mini=qwen, gpt-4o = llama" }).modelAliases).toEqual({ "gpt-4o-mini": "qwen", "gpt-4o": "llama" });
    expect(() => loadConfig({ PARLEY_MODEL_ALIASES: "gpt-4o-mini" })).toThrow(
      new ConfigError(`PARLEY_MODEL_ALIASES must be name=id pairs, comma-separated (got "gpt-4o-mini")`),
    );
    expect(loadConfig({}).keepAliveS).toBe(300);
    expect(loadConfig({ PARLEY_KEEP_ALIVE_S: "-1" }).keepAliveS).toBe(-1);
    expect(() => loadConfig({ PARLEY_KEEP_ALIVE_S: "-2" })).toThrow(new ConfigError(`PARLEY_KEEP_ALIVE_S must be an integer from -1 to 2592000 (got "-2")`));
    expect(() => loadConfig({ PARLEY_MAX_LOADED_MODELS: "0" })).toThrow(new ConfigError(`PARLEY_MAX_LOADED_MODELS must be an integer from 1 to 64 (got "0")`));
    expect(() => loadConfig({ PARLEY_PARALLEL: "-3" })).toThrow(new ConfigError(`PARLEY_PARALLEL must be an integer from 1 to 64 (got "-3")`));
  });
});

describe("PARLEY_SPECULATE", () => {
  test("auto by default, lookup or off when chosen; another value stops start-up", () => {
    expect(loadConfig({}).speculate).toBe("auto");
    expect(loadConfig({ PARLEY_SPECULATE: "lookup" }).speculate).toBe("lookup");
    expect(loadConfig({ PARLEY_SPECULATE: "off" }).speculate).toBe("off");
    expect(() => loadConfig({ PARLEY_SPECULATE: "always" })).toThrow(
      new ConfigError(`PARLEY_SPECULATE must be one of auto, lookup, draft, off (got "always")`),
    );
  });

  test("draft needs PARLEY_DRAFT_MODEL, which drafts only with auto or draft", () => {
    expect(loadConfig({}).draftModel).toBeUndefined();
    expect(loadConfig({ PARLEY_SPECULATE: "draft", PARLEY_DRAFT_MODEL: "small.gguf" })).toMatchObject({ speculate: "draft", draftModel: "small.gguf" });
    expect(loadConfig({ PARLEY_DRAFT_MODEL: "small.gguf" })).toMatchObject({ speculate: "auto", draftModel: "small.gguf" });
    expect(() => loadConfig({ PARLEY_SPECULATE: "draft" })).toThrow(new ConfigError("PARLEY_SPECULATE=draft needs a draft model: set PARLEY_DRAFT_MODEL"));
    expect(() => loadConfig({ PARLEY_SPECULATE: "off", PARLEY_DRAFT_MODEL: "small.gguf" })).toThrow(
      new ConfigError("PARLEY_DRAFT_MODEL drafts only with PARLEY_SPECULATE auto or draft (it is off)"),
    );
  });
});

describe("PARLEY_KV_RAM_MB", () => {
  test("1024 MiB by default, 0 for disk only; anything but a whole number of MiB stops start-up", () => {
    expect(loadConfig({}).kvRamMb).toBe(1024);
    expect(loadConfig({ PARLEY_KV_RAM_MB: "0" }).kvRamMb).toBe(0);
    expect(() => loadConfig({ PARLEY_KV_RAM_MB: "1.5" })).toThrow(new ConfigError(`PARLEY_KV_RAM_MB must be an integer from 0 to 16777216 (got "1.5")`));
  });
});

describe("PARLEY_KV_TYPE", () => {
  test("f16 by default, q8_0 or q4_0 when chosen; a quantized cache without flash attention, or another type, stops start-up", () => {
    expect(loadConfig({}).kvType).toBe("f16");
    expect(loadConfig({ PARLEY_KV_TYPE: "q8_0" }).kvType).toBe("q8_0");
    expect(loadConfig({ PARLEY_KV_TYPE: "q4_0", PARLEY_FLASH_ATTENTION: "on" }).kvType).toBe("q4_0");
    expect(loadConfig({ PARLEY_KV_TYPE: "f16", PARLEY_FLASH_ATTENTION: "off" }).kvType).toBe("f16");
    expect(() => loadConfig({ PARLEY_KV_TYPE: "q8_0", PARLEY_FLASH_ATTENTION: "off" })).toThrow(
      new ConfigError(
        "PARLEY_KV_TYPE=q8_0 quantizes the cache's values, which llama.cpp runs only with flash attention: set PARLEY_FLASH_ATTENTION to auto or on, or PARLEY_KV_TYPE to f16",
      ),
    );
    expect(() => loadConfig({ PARLEY_KV_TYPE: "q5_1" })).toThrow(new ConfigError(`PARLEY_KV_TYPE must be one of f16, q8_0, q4_0 (got "q5_1")`));
  });
});

describe("PARLEY_GPU", () => {
  test("false by default; cuda or true offload to CUDA, all layers unless PARLEY_GPU_LAYERS says; anything else stops start-up", () => {
    expect(loadConfig({})).toMatchObject({ gpu: false, gpuLayers: undefined });
    expect(loadConfig({ PARLEY_GPU: "cuda" }).gpu).toBe("cuda");
    expect(loadConfig({ PARLEY_GPU: "true" }).gpu).toBe("cuda");
    expect(loadConfig({ PARLEY_GPU: "off" }).gpu).toBe(false);
    expect(loadConfig({ PARLEY_GPU: "cuda", PARLEY_GPU_LAYERS: "20" })).toMatchObject({ gpu: "cuda", gpuLayers: 20 });
    expect(
      loadConfig(
        {},
        new Map([
          ["--gpu", "cuda"],
          ["--gpu-layers", "0"],
        ]),
      ),
    ).toMatchObject({ gpu: "cuda", gpuLayers: 0 });
    expect(() => loadConfig({ PARLEY_GPU: "vulkan" })).toThrow(new ConfigError(`PARLEY_GPU must be cuda, true or false (got "vulkan")`));
    expect(() => loadConfig({ PARLEY_GPU_LAYERS: "20" })).toThrow(new ConfigError("PARLEY_GPU_LAYERS offloads layers to a GPU: set PARLEY_GPU=cuda too"));
    expect(() => loadConfig({ PARLEY_GPU: "cuda", PARLEY_GPU_LAYERS: "-1" })).toThrow(
      new ConfigError(`PARLEY_GPU_LAYERS must be an integer from 0 to 10000 (got "-1")`),
    );
  });
});

describe("pictures", () => {
  test("hosts whose picture URLs are fetched: none by default, a list of host names, lower-cased; a URL instead stops start-up", () => {
    expect(loadConfig({}).pictureHosts).toEqual([]);
    expect(loadConfig({ PARLEY_PICTURE_HOSTS: "Images.Example.com, 10.0.0.7" }).pictureHosts).toEqual(["images.example.com", "10.0.0.7"]);
    expect(() => loadConfig({ PARLEY_PICTURE_HOSTS: "https://images.example.com" })).toThrow(/^PARLEY_PICTURE_HOSTS must list host names/);
    expect(loadConfig({}).pictureBodyLimitBytes).toBe(32 << 20);
    expect(() => loadConfig({ PARLEY_PICTURE_BODY_LIMIT: "10" })).toThrow(/^PARLEY_PICTURE_BODY_LIMIT must be an integer from 1024/);
  });
});
