import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Engine, type GenerateRequest, type GenerateResult, type Turn } from "../../src/llm/engine";
import { writePresetModel } from "../../src/llm/gguf/presets";

const dir = mkdtempSync(join(tmpdir(), "parley-kv-"));
const modelPath = join(dir, "demo.gguf");
const kvDir = join(dir, "kv");

beforeAll(() => writePresetModel("demo", modelPath));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** One sequence, so every other conversation evicts the last one. */
const load = (maxBytes = 64 * 2 ** 20) =>
  Engine.load({ modelPath, contextSize: 1024, parallel: 1, threads: 1, kvCache: { dir: kvDir, maxBytes } });

async function reply(engine: Engine, key: string, history: Turn[]): Promise<GenerateResult> {
  const gen = engine.generate({ conversationKey: key, history, temperature: 0, maxTokens: 64 } satisfies GenerateRequest);
  for (;;) {
    const step = await gen.next();
    if (step.done) return step.value;
  }
}

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

const kvFiles = () => readdirSync(kvDir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile() && e.name.endsWith(".kv"));

describe("saved KV states", () => {
  let engine: Engine;
  const a = conversation(() => engine, "a");
  const b = conversation(() => engine, "b");

  test("an evicted conversation comes back from its state file, token for token", async () => {
    engine = await load();
    const first = await a("hello there");
    await b("something else"); // takes the only sequence: a's state is written
    expect(kvFiles()).toHaveLength(1);
    const second = await a("tell me more");
    expect(second.cachedTokens).toBe(first.promptTokens + first.completionTokens);
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
    const bytes = kvFiles().reduce((sum, f) => sum + statSync(join(f.parentPath, f.name)).size, 0);
    expect(bytes).toBeLessThanOrEqual(120_000);
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
