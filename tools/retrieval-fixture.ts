/**
 * `bun run tools/retrieval-fixture.ts`: what llama-server (built from the llama.cpp source
 * node-llama-cpp bundles, bench/perf/yardstick.ts) answers for the retrieval presets, written to
 * test/fixtures/llama-server-retrieval.json with each model file's sha256. test/http/retrieval.test.ts
 * checks Parley's vectors and scores against it; a preset whose bytes change fails there until
 * this is run again.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { startLlamaServer } from "../bench/perf/procs";
import { buildLlamaServer } from "../bench/perf/yardstick";
import { writePresetModel } from "../src/gguf/presets";
import { fileSha256, tempDir } from "../test/support/files";
import { EMBED_INPUTS, FIXTURE_PATH, RERANK_DOCUMENTS, RERANK_QUERY, type RetrievalFixture } from "../test/support/retrieval";

const binary = await buildLlamaServer();
const dir = tempDir("retrieval-fixture");

async function answer(preset: "embed" | "rerank", flag: string, path: string, body: object): Promise<{ sha256: string; response: unknown }> {
  const model = join(dir, `${preset}.gguf`);
  await writePresetModel(preset, model);
  const server = await startLlamaServer({ binary, model, threads: 1, parallel: 4, contextSize: 1024, flags: [flag, "-b", "1024", "-ub", "1024"] });
  try {
    const response = await fetch(`${server.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    if (!response.ok) throw new Error(`llama-server answered ${response.status}: ${await response.text()}`);
    return { sha256: await fileSha256(model), response: await response.json() };
  } finally {
    await server.stop();
  }
}

const embed = await answer("embed", "--embeddings", "/v1/embeddings", { input: EMBED_INPUTS });
const rerank = await answer("rerank", "--rerank", "/v1/rerank", { query: RERANK_QUERY, documents: RERANK_DOCUMENTS });
const fixture: RetrievalFixture = {
  embed: { sha256: embed.sha256, vectors: (embed.response as { data: { embedding: number[] }[] }).data.map((item) => item.embedding) },
  rerank: { sha256: rerank.sha256, results: (rerank.response as RetrievalFixture["rerank"] & { results: unknown }).results },
};
writeFileSync(FIXTURE_PATH, `${JSON.stringify(fixture)}\n`);
console.log(`wrote ${FIXTURE_PATH}`);
