/**
 * Run by embedder.test.ts in a process of its own (a process loads one build of the natives): the
 * retrieval presets' vectors and scores on the npm prebuilt, which pools one input a decode and
 * adds the tokenizer's special tokens in JavaScript. Prints them as JSON.
 */
import { Embedder } from "../../src/llm/embedder";
import { EMBED_INPUTS, RERANK_DOCUMENTS, RERANK_QUERY } from "../support/retrieval";

const [embedPath, rerankPath] = Bun.argv.slice(2);
const embedder = await Embedder.load({ modelPath: embedPath!, localNatives: false, threads: 1, parallel: 4, contextSize: 1024 });
const vectors = await embedder.embed(EMBED_INPUTS.map((text) => embedder.embeddingTokens(text)));
const embedNatives = embedder.natives;
await embedder.close();
const ranker = await Embedder.load({ modelPath: rerankPath!, localNatives: false, threads: 1, parallel: 4, contextSize: 1024 });
const scores = await ranker.rank(RERANK_DOCUMENTS.map((document) => ranker.rankingTokens(RERANK_QUERY, document)));
await ranker.close();
console.log(JSON.stringify({ natives: embedNatives, vectors: vectors.map((vector) => Array.from(vector)), scores }));
