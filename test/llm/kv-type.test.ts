/**
 * `PARLEY_KV_TYPE`: a quantized KV cache (as llama-server's `-ctk/-ctv q8_0`) loads, answers, and
 * holds a conversation in about half the bytes, saved states included; a state saved with one
 * type is never loaded by an engine of another (each type keeps its own states).
 */
import { afterAll, describe, expect, test } from "bun:test";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { Engine, type KvType, type Turn } from "../../src/llm/engine";
import { allowSlowTests, generated, presetModel, tempDir, until } from "../support";

allowSlowTests();

const kvDir = tempDir("kv-type");
const engines: Engine[] = [];
afterAll(() => Promise.all(engines.map((engine) => engine.close())));

const load = async (kvType: KvType) => {
  const engine = await Engine.load({
    modelPath: await presetModel("bench-small"),
    contextSize: 1024,
    parallel: 1,
    threads: 1,
    kvType,
    kvCache: { dir: kvDir, maxBytes: 2 ** 30 },
  });
  engines.push(engine);
  return engine;
};

/** A prompt of a few hundred tokens, so the state's cells outweigh its fixed parts. */
const HISTORY: Turn[] = [{ role: "user", content: Array.from({ length: 60 }, (_, i) => `word${i} of a long question`).join(" ") }];

const turn = (engine: Engine, key: string) => generated(engine, { conversationKey: key, cacheScope: "u", history: HISTORY, temperature: 0, maxTokens: 8 });

/** The bytes of the state files saved so far (the last save's temporary file renamed). */
function savedBytes(): number {
  const files = readdirSync(kvDir, { recursive: true, withFileTypes: true }).filter((entry) => entry.isFile());
  return files.filter((entry) => entry.name.endsWith(".kv")).reduce((sum, entry) => sum + statSync(join(entry.parentPath, entry.name)).size, 0);
}

describe("a quantized KV cache", () => {
  test("answers, and saves a conversation in about half the bytes of f16; neither type loads the other's state", async () => {
    const f16 = await load("f16");
    const plain = await turn(f16, "conversation");
    expect(plain.completionTokens).toBeGreaterThan(0);
    await f16.close();
    await until(() => savedBytes() > 0, "the f16 state to be saved");
    const f16Bytes = savedBytes();

    const q8 = await load("q8_0");
    const quantized = await turn(q8, "conversation");
    expect(quantized.completionTokens).toBeGreaterThan(0);
    // The same conversation, but the f16 state is not q8_0's: evaluated afresh, nothing cached.
    expect(quantized.cachedTokens).toBe(0);
    await q8.close();
    await until(() => savedBytes() > f16Bytes, "the q8_0 state to be saved beside it");
    const q8Bytes = savedBytes() - f16Bytes;
    expect(q8Bytes / f16Bytes).toBeLessThan(0.6);
    expect(q8Bytes / f16Bytes).toBeGreaterThan(0.45);
  });
});
