import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import fc from "fast-check";
import { getLlama, type LlamaContextSequence, type LlamaModel, LlamaText } from "node-llama-cpp";
import { writePresetModel } from "../../src/gguf/presets";
import { Engine, type GenerateResult, type Turn } from "../../src/llm/engine";
import { forgetSaved, KvStore, stateSizeBound } from "../../src/llm/kv-store";
import { StateMemory } from "../../src/llm/state-memory";
import { copyState, restoreState, stateFileParts } from "../../src/natives/addon";
import { allowSlowTests, compiledNatives, generated, until } from "../support";

allowSlowTests();

const natives = await compiledNatives();

const dir = mkdtempSync(join(tmpdir(), "parley-kv-"));
const modelPath = join(dir, "demo.gguf");
const kvDir = join(dir, "kv");

beforeAll(() => writePresetModel("demo", modelPath));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** One sequence, so every other conversation evicts the last one. */
const load = (maxBytes = 64 * 2 ** 20, onWarning?: (message: string) => void, memory?: StateMemory) =>
  Engine.load({ modelPath, contextSize: 1024, parallel: 1, threads: 1, kvCache: { dir: kvDir, maxBytes, ...(memory ? { memory } : {}) }, onWarning });

const reply = (engine: Engine, key: string, history: Turn[]): Promise<GenerateResult> =>
  generated(engine, { conversationKey: key, cacheScope: "test", history, temperature: 0, maxTokens: 64 });

/** A conversation that remembers its turns, like the chat service does. */
function conversation(engine: () => Engine, key: string) {
  const history: Turn[] = [];
  return async (message: string) => {
    history.push({ role: "user", content: message });
    const result = await reply(engine(), key, history);
    history.push({ role: "assistant", content: result.text });
    return result;
  };
}

const entries = () => readdirSync(kvDir, { recursive: true, withFileTypes: true });
/** Saves finish their files after the turn that made them has gone on: a temporary file remains until then. */
const written = () => until(() => !entries().some((e) => e.name.includes(".tmp.")), "the saves in flight to finish");
const kvFiles = () => entries().filter((e) => e.isFile() && e.name.endsWith(".kv"));
const kvPaths = () => new Set(kvFiles().map((f) => join(f.parentPath, f.name)));

describe("saved KV states", () => {
  let engine: Engine;
  /** The state files after the first test. */
  let before = new Set<string>();
  const a = conversation(() => engine, "a");
  const b = conversation(() => engine, "b");

  test("an evicted conversation comes back from its state file, token for token", async () => {
    engine = await load();
    const first = await a("hello there");
    await b("something else"); // takes the only sequence: a's state is written
    await written();
    expect(kvFiles()).toHaveLength(1);
    const second = await a("tell me more");
    expect(second.cachedTokens).toBe(first.promptTokens + first.completionTokens);
    before = kvPaths();
  });

  test("a deleted conversation's saved states go under every model's directory, also a model not loaded", async () => {
    const c = conversation(() => engine, "c");
    await c("remember me");
    await b("take the sequence"); // c's state is written
    await written();
    const mine = [...kvPaths()].filter((path) => !before.has(path));
    expect(mine).toHaveLength(1);
    // Another model's directory, as a model loaded earlier and unloaded since left it.
    const other = join(kvDir, "another-model");
    mkdirSync(other, { recursive: true });
    for (const ext of [".kv", ".json"]) copyFileSync(mine[0]!.replace(/\.kv$/, ext), join(other, basename(mine[0]!).replace(/\.kv$/, ext)));
    await forgetSaved(kvDir, "c");
    expect([...kvPaths()].sort()).toEqual([...before].sort());
    expect(readdirSync(other)).toEqual([]);
    rmSync(other, { recursive: true });
  });

  test("warm conversations survive a restart", async () => {
    await engine.close(); // saves what the sequence holds (a)
    engine = await load();
    const before = await b("and b again"); // restored from disk too
    expect(before.cachedTokens).toBeGreaterThan(20);
    const third = await a("one more");
    expect(third.cachedTokens).toBeGreaterThan(third.promptTokens - 30);
  });

  test("a corrupt state file is dropped and the history re-evaluated", async () => {
    await b("evict a"); // a is on disk
    await written();
    for (const file of kvFiles()) writeFileSync(join(file.parentPath, file.name), "not a state");
    const result = await a("still there?");
    expect(result.finishReason).toBe("stop");
    expect(result.cachedTokens).toBeLessThan(20);
    await engine.close();
  });

  test("the directory stays within its byte budget, least recently used first", async () => {
    rmSync(kvDir, { recursive: true, force: true });
    engine = await load(120_000);
    const keys = ["k1", "k2", "k3", "k4", "k5"];
    for (const key of keys) await reply(engine, key, [{ role: "user", content: `hello from ${key}` }]);
    const bytes = () => kvFiles().reduce((sum, f) => sum + statSync(join(f.parentPath, f.name)).size, 0);
    // Eviction follows a save's renames.
    await written();
    await until(() => bytes() <= 120_000, "the states to fit the budget");
    expect(kvFiles().length).toBeGreaterThan(0);
    await engine.close();
  });
});

describe("a changed system prompt", () => {
  const history = (system: string): Turn[] => [
    { role: "system", content: system },
    { role: "user", content: "hello there, how are you today" },
  ];

  const continued = (system: string, reply: string): Turn[] => [...history(system), { role: "assistant", content: reply }, { role: "user", content: "more" }];

  test("is never a wrong reuse: from memory or from a saved state, the new prompt is evaluated", async () => {
    rmSync(kvDir, { recursive: true, force: true });
    const engine = await load();
    try {
      const first = await reply(engine, "sys", history("You are a pirate who loves the sea and ships."));
      const same = await reply(engine, "sys", continued("You are a pirate who loves the sea and ships.", first.text));
      expect(same.cachedTokens).toBeGreaterThan(20);

      const inMemory = await reply(engine, "sys", continued("Answer as a poet would.", first.text));
      expect(inMemory.prompt).toContain("Answer as a poet would.");
      expect(inMemory.prompt).not.toContain("pirate");
      expect(inMemory.cachedTokens).toBeLessThan(10);

      await reply(engine, "other", [{ role: "user", content: "take the sequence" }]); // "sys" goes to disk
      const fromDisk = await reply(engine, "sys", continued("Now a third persona.", first.text));
      expect(fromDisk.prompt).toContain("Now a third persona.");
      expect(fromDisk.prompt).not.toContain("poet");
      expect(fromDisk.cachedTokens).toBeLessThan(10);
    } finally {
      await engine.close();
    }
  });
});

describe("damaged state files", () => {
  const FIRST = "hello there";
  const SECOND = "tell me more";
  const warnings: string[] = [];
  let engine: Engine;
  /** The second reply of a conversation that another one interrupted, with the KV cache off. */
  let expected: string;

  beforeAll(async () => {
    rmSync(kvDir, { recursive: true, force: true });
    engine = await load(undefined, (message) => void warnings.push(message));
    await using plain = await Engine.load({ modelPath, contextSize: 1024, parallel: 1, threads: 1 });
    const a = conversation(() => plain, "a");
    await a(FIRST);
    await reply(plain, "other", [{ role: "user", content: "something else" }]);
    expected = (await a(SECOND)).text;
  });
  afterAll(() => engine.close());

  let runs = 0;

  /**
   * Runs a conversation until its state is on disk, applies `damage` to the state file (and its
   * sidecar), and returns the conversation's next reply and whether the pair was deleted.
   */
  async function afterDamage(damage: (kv: string, sidecar: string) => void) {
    const key = `c${++runs}`;
    const a = conversation(() => engine, key);
    await a(FIRST);
    // Taking the sequence for `a` saved the conversation before it; its files finish behind.
    await written();
    const before = kvPaths();
    // Takes the only sequence: a's state is written.
    await reply(engine, `${key}-other`, [{ role: "user", content: "something else" }]);
    await written();
    const [kv, ...more] = [...kvPaths()].filter((path) => !before.has(path));
    expect(more).toHaveLength(0);
    const sidecar = kv!.replace(/\.kv$/, ".json");
    damage(kv!, sidecar);
    const warned = warnings.length;
    const result = await a(SECOND);
    return { result, deleted: !existsSync(kv!) && !existsSync(sidecar), warned: warnings.slice(warned) };
  }

  const expectRecovered = ({ result, deleted, warned }: Awaited<ReturnType<typeof afterDamage>>) => {
    expect(result.text).toBe(expected);
    expect(deleted).toBe(true);
    expect(warned).toEqual([expect.stringContaining("saved KV state was unusable")]);
  };

  test("an intact state is reused and gives the same reply as the cache off", async () => {
    const { result, deleted, warned } = await afterDamage(() => {});
    expect(result.text).toBe(expected);
    expect(result.cachedTokens).toBeGreaterThan(20);
    expect(deleted).toBe(false);
    expect(warned).toEqual([]);
  });

  test("a truncated state file (which aborts llama.cpp) is deleted and the history re-evaluated", async () => {
    expectRecovered(await afterDamage((kv) => truncateSync(kv, Math.floor(statSync(kv).size / 2))));
  });

  // After the magic, the version, the token count and the tokens: a stream count, the cell count,
  // then each cell's position. A huge cell count made llama.cpp allocate until the kernel killed it.
  test.each([
    ["cell count", 4],
    ["first cell's position", 8],
  ])("a huge %s is deleted, never loaded", async (_, offset) => {
    expectRecovered(
      await afterDamage((kv) => {
        const bytes = readFileSync(kv);
        bytes.writeUInt32LE(0x7fffffff, 12 + 4 * bytes.readUInt32LE(8) + offset);
        writeFileSync(kv, bytes);
      }),
    );
  });

  test("flipped bytes in the KV data are caught, not loaded as if valid", async () => {
    expectRecovered(
      await afterDamage((kv) => {
        const bytes = readFileSync(kv);
        for (const at of [bytes.length - 100, Math.floor(bytes.length * 0.7)]) bytes[at]! ^= 0x10;
        writeFileSync(kv, bytes);
      }),
    );
  });

  test("a sidecar whose transcript was altered is caught", async () => {
    expectRecovered(await afterDamage((_, sidecar) => writeFileSync(sidecar, readFileSync(sidecar, "utf8").replace(FIRST, "hello_there"))));
  });

  test("a state saved without a checksum (by an older version) is deleted", async () => {
    expectRecovered(
      await afterDamage((_, sidecar) => {
        const { transcript } = JSON.parse(readFileSync(sidecar, "utf8")) as { transcript: object };
        writeFileSync(sidecar, JSON.stringify(transcript));
      }),
    );
  });

  test("a state checksummed with SHA-256 (format 2, an older version) is deleted, not trusted", async () => {
    expectRecovered(
      await afterDamage((kv, sidecar) => {
        const { transcript, kvBytes } = JSON.parse(readFileSync(sidecar, "utf8")) as { transcript: object; kvBytes: number };
        const digest = new Bun.CryptoHasher("sha256").update(readFileSync(kv)).update(JSON.stringify(transcript)).digest("hex");
        writeFileSync(sidecar, JSON.stringify({ format: 2, kvBytes, digest, transcript }));
      }),
    );
  });

  test("property: random damage never crashes and never changes a reply", async () => {
    const bytes = fc.uint8Array({ minLength: 1, maxLength: 16 });
    const huge = fc.constantFrom(0x7fffffff, 0xffffffff, 0x80000000).map((value) => {
      const word = Buffer.alloc(4);
      word.writeUInt32LE(value);
      return new Uint8Array(word);
    });
    const damage = fc.oneof(
      fc.record({ kind: fc.constant("truncate" as const), at: fc.nat() }),
      fc.record({ kind: fc.constant("overwrite" as const), at: fc.nat(), bytes: fc.oneof(bytes, huge) }),
      fc.record({ kind: fc.constant("append" as const), bytes }),
    );
    type Damage = typeof damage extends fc.Arbitrary<infer T> ? T : never;
    const damaged = (file: Buffer, hit: Damage): Buffer => {
      if (hit.kind === "truncate") return file.subarray(0, hit.at % Math.max(1, file.length));
      if (hit.kind === "append") return Buffer.concat([file, hit.bytes]);
      const patch = hit.bytes.subarray(0, file.length);
      // Word-aligned, like the counts and positions llama.cpp reads.
      const at = Math.max(0, Math.min(hit.at % Math.max(1, file.length), file.length - patch.length)) & ~3;
      const next = Buffer.from(file);
      next.set(patch, at);
      return next;
    };
    const target = fc.constantFrom("kv", "kv", "kv", "sidecar");
    // Set KV_DAMAGE_SEED to replay a failure: fast-check reports the seed (and path) it failed with.
    const seed = Number(Bun.env.KV_DAMAGE_SEED ?? Math.floor(Math.random() * 2 ** 31));
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(target, damage), { minLength: 1, maxLength: 3 }), async (damages) => {
        let changed = false;
        const outcome = await afterDamage((kv, sidecar) => {
          const originals = [readFileSync(kv), readFileSync(sidecar)];
          for (const [which, hit] of damages) {
            const path = which === "kv" ? kv : sidecar;
            writeFileSync(path, damaged(readFileSync(path), hit));
          }
          changed = !readFileSync(kv).equals(originals[0]!) || !readFileSync(sidecar).equals(originals[1]!);
        });
        expect(outcome.result.text).toBe(expected);
        expect(outcome.deleted).toBe(changed);
        expect(outcome.warned).toHaveLength(changed ? 1 : 0);
      }),
      { seed, numRuns: 40, endOnFailure: true },
    );
  });
});

describe.skipIf(!natives)("saved KV states kept in memory (PARLEY_KV_RAM_MB)", () => {
  const warnings: string[] = [];
  let engine: Engine;
  let memory: StateMemory;
  /** The bytes of the first state held. */
  let oneState = 0;
  /** A's second reply with the KV cache off, and after another conversation took its sequence. */
  let expected: string;
  const [k1, k2, k3, k4] = ["k1", "k2", "k3", "k4"].map((key) => conversation(() => engine, key)) as [
    ReturnType<typeof conversation>,
    ReturnType<typeof conversation>,
    ReturnType<typeof conversation>,
    ReturnType<typeof conversation>,
  ];

  beforeAll(async () => {
    rmSync(kvDir, { recursive: true, force: true });
    await using plain = await Engine.load({ modelPath, contextSize: 1024, parallel: 1, threads: 1 });
    const a = conversation(() => plain, "a");
    await a("hello there");
    await reply(plain, "other", [{ role: "user", content: "something else" }]);
    expected = (await a("tell me more")).text;
  });
  afterAll(() => engine.close());

  test("a conversation's state comes back from memory, token for token, and no file is written", async () => {
    memory = new StateMemory(64 * 2 ** 20);
    engine = await load(undefined, (message) => void warnings.push(message), memory);
    const a = conversation(() => engine, "a");
    const first = await a("hello there");
    await reply(engine, "other", [{ role: "user", content: "something else" }]); // a's state goes to memory
    oneState = memory.size;
    expect(oneState).toBeGreaterThan(0);
    const second = await a("tell me more");
    expect(second.cachedTokens).toBe(first.promptTokens + first.completionTokens);
    expect(second.text).toBe(expected);
    // Another conversation with the same words, of another user, finds nothing of a's.
    await reply(engine, "other", [{ role: "user", content: "something else" }]);
    const stranger = await generated(engine, {
      conversationKey: "stranger",
      cacheScope: "another user",
      history: [{ role: "user", content: "hello there" }],
      temperature: 0,
      maxTokens: 64,
    });
    expect(stranger.cachedTokens).toBeLessThan(5);
    expect(kvFiles()).toEqual([]);
    expect(warnings).toEqual([]);
  });

  test("beyond its budget the least recently used state goes to disk, and comes back from there", async () => {
    await engine.close();
    rmSync(kvDir, { recursive: true, force: true });
    // Room for two states of about this size.
    memory = new StateMemory(Math.floor(2.5 * oneState));
    engine = await load(undefined, (message) => void warnings.push(message), memory);
    const first = await k1("hello there");
    for (const next of [k2, k3, k4]) await next("hello there"); // saves k1, k2, k3: k1 leaves memory
    await written();
    await until(() => kvFiles().length === 1, "k1's state to be spilled to disk");
    expect(memory.size).toBeLessThanOrEqual(memory.maxBytes);
    const again = await k1("tell me more");
    expect(again.cachedTokens).toBe(first.promptTokens + first.completionTokens);
    expect(again.text).toBe(expected);
    expect(warnings).toEqual([]);
  });

  test("closing writes what memory holds, and a restart finds it", async () => {
    await engine.close();
    expect(memory.size).toBe(0);
    expect(kvFiles()).toHaveLength(4);
    engine = await load(undefined, (message) => void warnings.push(message), memory);
    expect((await k2("and again")).cachedTokens).toBeGreaterThan(20);
  });

  test("a deleted conversation's state leaves memory too", async () => {
    const gone = conversation(() => engine, "gone");
    await gone("remember me");
    await reply(engine, "other", [{ role: "user", content: "take the sequence" }]);
    const held = memory.size;
    await engine.forget("gone");
    expect(memory.size).toBeLessThan(held);
    expect((await gone("still there?")).cachedTokens).toBeLessThan(10);
  });
});

describe.skipIf(!natives)("a sequence's state copied in memory (natives/addon.ts)", () => {
  test("restores exactly, writes llama.cpp's own state file, and bytes cut short or of another kind are refused, the sequence left empty", async () => {
    const llama = await getLlama({ gpu: false, build: "never" });
    try {
      const model = await llama.loadModel({ modelPath });
      const context = await model.createContext({ contextSize: 256, sequences: 2, threads: 1 });
      const [source, target] = [context.getSequence(), context.getSequence()] as const;
      await source.evaluateWithoutGeneratingNewTokens(model.tokenize("a state to copy, and to copy back"));
      const state = await copyState(source);
      const file = join(dir, "copied.kv");
      await source.saveStateToFile(file);
      expect(Buffer.concat(stateFileParts(state))).toEqual(readFileSync(file));

      await restoreState(target, state);
      expect(target.contextTokens).toEqual(source.contextTokens);
      // The cells came along too: both continue alike.
      const greedy = async (sequence: typeof source) => {
        const tokens: number[] = [];
        for await (const token of sequence.evaluate(model.tokenize(" and then"), { temperature: 0 })) if (tokens.push(token) === 12) break;
        return tokens;
      };
      expect(await greedy(target)).toEqual(await greedy(source));

      const [head] = stateFileParts(state);
      const otherMagic = Buffer.from(state.bytes);
      otherMagic[head.length] = otherMagic[head.length]! ^ 0xff;
      for (const bytes of [state.bytes.subarray(0, state.bytes.length - 7), state.bytes.subarray(0, head.length + 4), otherMagic]) {
        await expect(restoreState(target, { bytes, tokens: state.tokens })).rejects.toThrow(/could not restore/);
        expect(target.contextTokens).toEqual([]);
        expect(target.nextTokenIndex).toBe(0);
      }
    } finally {
      await llama.dispose();
    }
  });
});

describe("saved KV states, two sequences", () => {
  test("a conversation whose sequence another turn took, back at that moment on the other sequence, loads the state that turn saved", async () => {
    const engine = await Engine.load({ modelPath, contextSize: 1024, parallel: 2, threads: 1, kvCache: { dir: join(dir, "kv-two"), maxBytes: 64 * 2 ** 20 } });
    try {
      const [a, c, y] = ["a", "c", "y"].map((key) => conversation(() => engine, key)) as [
        ReturnType<typeof conversation>,
        ReturnType<typeof conversation>,
        ReturnType<typeof conversation>,
      ];
      const first = await a("hello there");
      // On the other sequence: a's is now the least recently used.
      await c("something else");
      // y takes a's sequence and saves a; a, asking in the same moment, gets c's sequence.
      const [, second] = await Promise.all([y("a third one"), a("tell me more")]);
      expect(second.cachedTokens).toBe(first.promptTokens + first.completionTokens);
    } finally {
      await engine.close();
    }
  });
});

/**
 * A one-sequence context of the demo model holding `text`, and a store under `dir/<name>` that
 * throws on any warning (with the `StateMemory` that `memoryFor` makes once the text is held).
 */
async function withStore(
  name: string,
  text: LlamaText,
  body: (store: KvStore, held: { model: LlamaModel; sequence: LlamaContextSequence }) => Promise<void>,
  memoryFor?: (sequence: LlamaContextSequence) => Promise<StateMemory>,
): Promise<void> {
  const llama = await getLlama({ gpu: false, build: "never" });
  try {
    const model = await llama.loadModel({ modelPath });
    const context = await model.createContext({ contextSize: 256, sequences: 1, threads: 1 });
    const sequence = context.getSequence();
    await sequence.evaluateWithoutGeneratingNewTokens(model.tokenize(text.toString()));
    const memory = await memoryFor?.(sequence);
    const root = join(dir, name);
    mkdirSync(root);
    const store = await KvStore.open({
      root,
      identity: "test",
      maxBytes: 2 ** 30,
      contextSize: 256,
      maxStateBytes: await stateSizeBound(model, context),
      ...(memory ? { memory } : {}),
      warn: (message) => {
        throw new Error(message);
      },
    });
    await body(store, { model, sequence });
  } finally {
    await llama.dispose();
  }
}

describe("KvStore", () => {
  test.skipIf(!natives)("a state too large for memory goes to its file, and the older copy in memory is not found before it", async () => {
    const short = LlamaText("a short start");
    let memory: StateMemory | undefined;
    // Room for the short state, not for one three times as long.
    const memoryFor = async (sequence: LlamaContextSequence) => (memory = new StateMemory(Math.floor(1.2 * (await copyState(sequence)).bytes.byteLength)));
    await withStore(
      "store-memory",
      short,
      async (store, { model, sequence }) => {
        await store.save({ key: "k", text: short, tokens: [...sequence.contextTokens] }).capture(sequence);
        expect(memory!.size).toBeGreaterThan(0);
        const long = LlamaText(`${short.toString()}, and then a much longer rest that runs on well past it`);
        await sequence.evaluateWithoutGeneratingNewTokens(model.tokenize(long.toString()).slice(sequence.contextTokens.length));
        const grown = { key: "k", text: long, tokens: [...sequence.contextTokens] };
        expect(await (await store.save(grown).capture(sequence)).written).toBe(true);
        const found = await store.find("k");
        expect(found?.state).toBeUndefined();
        expect(found?.transcript.tokens).toEqual(grown.tokens);
        expect(memory!.size).toBe(0);
      },
      memoryFor,
    );
  });

  test("a save resolves once the state is captured; finding the conversation meanwhile waits for its files", async () => {
    const text = LlamaText("hello there, saved while it goes on");
    await withStore("store", text, async (store, { sequence }) => {
      const transcript = { key: "k", text, tokens: [...sequence.contextTokens] };

      const { written } = await store.save(transcript).capture(sequence);
      let done = false;
      void written.then(() => (done = true));
      // Captured: the sequence may serve another conversation at once.
      expect(done).toBe(false);
      await sequence.clearHistory();
      const found = await store.find("k");
      expect(done).toBe(true);
      expect(await written).toBe(true);
      expect(await store.load(sequence, found!)).toEqual(transcript);
      expect(sequence.contextTokens).toEqual(transcript.tokens);
    });
  });
});
