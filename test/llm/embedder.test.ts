/**
 * The retrieval engine: inputs decoded together each get their own vector, as alone; a request
 * that leaves takes its waiting inputs off the queue while the others are served; scopes are
 * served in turn; a ranking's query and document are written into the ranking prompt as they are;
 * and on the npm prebuilt (one input a decode, special tokens added in JavaScript) the vectors and
 * scores are still llama-server's for the same files.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { Embedder } from "../../src/llm/embedder";
import { allowSlowTests, EMBED_INPUTS, presetModel, RERANK_DOCUMENTS, readFixture, rejection } from "../support";

allowSlowTests();

const ROOT = join(import.meta.dir, "../..");
const maxDifference = (a: ArrayLike<number>, b: ArrayLike<number>) => Math.max(...Array.from(a, (x, i) => Math.abs(x - b[i]!)));

describe("the retrieval engine", () => {
  let embedder: Embedder;
  beforeAll(async () => {
    embedder = await Embedder.load({ modelPath: await presetModel("embed"), threads: 1, parallel: 4, contextSize: 1024 });
  });
  afterAll(() => embedder.close());

  test("inputs decoded together get each its own vector, as each alone", async () => {
    const inputs = EMBED_INPUTS.map((text) => embedder.embeddingTokens(text));
    const together = await embedder.embed(inputs);
    for (const [i, tokens] of inputs.entries()) {
      const [alone] = await embedder.embed([tokens]);
      expect(maxDifference(together[i]!, alone!)).toBeLessThan(1e-3);
    }
  });

  test("a request that leaves takes its waiting inputs off the queue; the others are served", async () => {
    const many = Array.from({ length: 48 }, (_, i) => embedder.embeddingTokens(`input number ${i} about the sea`));
    const first = embedder.embed(many);
    const leaving = new AbortController();
    const left = embedder.embed(many, { signal: leaving.signal });
    leaving.abort();
    const after = embedder.embed([embedder.embeddingTokens("after")]);
    expect(((await rejection(left)) as Error).name).toBe("AbortError");
    expect(await first).toHaveLength(48);
    expect(await after).toHaveLength(1);
  });

  test("scopes are served in turn: one input queued after another scope's many is done before them", async () => {
    const many = Array.from({ length: 48 }, (_, i) => embedder.embeddingTokens(`input number ${i} about the sea`));
    const finished: string[] = [];
    const big = embedder.embed(many, { scope: "a" }).then(() => finished.push("a"));
    const small = embedder.embed([embedder.embeddingTokens("a short one")], { scope: "b" }).then(() => finished.push("b"));
    await Promise.all([big, small]);
    expect(finished).toEqual(["b", "a"]);
  });
});

test("a ranking's query and document are written into the ranking prompt as they are: placeholders' texts and $ patterns in them stay text", async () => {
  const ranker = await Embedder.load({ modelPath: await presetModel("rerank"), threads: 1, parallel: 1, contextSize: 1024 });
  try {
    const document = Array.from({ length: 40 }, (_, i) => `sentence ${i} of a document`).join(". ");
    const plain = ranker.rankingTokens("{documenX} $X $X", document).length;
    // Expanded, the document would be written into the query twice more, each over 200 tokens.
    expect(Math.abs(ranker.rankingTokens("{document} $' $&", document).length - plain)).toBeLessThanOrEqual(4);
    expect(Math.abs(ranker.rankingTokens("{documenX} $X $X", `{query} ${document}`).length - plain)).toBeLessThanOrEqual(4);
  } finally {
    await ranker.close();
  }
});

test("on the npm prebuilt, one input a decode, the vectors and scores are llama-server's", async () => {
  const child = Bun.spawnSync(["bun", "test/llm/prebuilt-pooling.ts", await presetModel("embed"), await presetModel("rerank")], {
    cwd: ROOT,
    stdout: "pipe",
    stderr: "pipe",
  });
  expect(child.exitCode, child.stderr.toString()).toBe(0);
  const { natives, vectors, scores } = JSON.parse(child.stdout.toString().trim().split("\n").at(-1)!) as {
    natives: string;
    vectors: number[][];
    scores: number[];
  };
  expect(natives).toBe("prebuilt");
  const fixture = await readFixture();
  for (const [i, expected] of fixture.embed.vectors.entries()) expect(maxDifference(vectors[i]!, expected)).toBeLessThan(1e-3);
  for (const { index, relevance_score } of fixture.rerank.results) expect(Math.abs(scores[index]! - relevance_score)).toBeLessThan(3e-3);
  expect(scores).toHaveLength(RERANK_DOCUMENTS.length);
});
