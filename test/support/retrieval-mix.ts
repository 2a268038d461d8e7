/**
 * The mixed load's retrieval and legacy-completion clients. A retrieval client embeds a few texts
 * (`/v1/embeddings` or Ollama's `/api/embed`) or reranks documents (`/v1/rerank`), now and then
 * leaving before the answer; a completions client has prompts continued (`/v1/completions`),
 * streamed or not, some streams left after a few chunks. Answers must be whole and in shape:
 * a unit vector an input, every document ranked once and best first, a stream ending in `[DONE]`
 * with no error chunk.
 */
import { bearer } from "./http";
import { drawTurn, type Ending, message } from "./mix-draws";
import type { Random } from "./random";
import { sseEvents } from "./sse";

const RETRIEVAL = ["embeddings", "rerank", "ollama embed"] as const;

const post = (url: string, key: string, body: unknown, signal: AbortSignal) =>
  fetch(url, { method: "POST", headers: { ...bearer(key), "content-type": "application/json" }, body: JSON.stringify(body), signal });

const isUnit = (vector: readonly number[]) => Math.abs(Math.hypot(...vector) - 1) < 1e-3;

/** What a retrieval answer must be: `undefined` when it is. */
function misshapen(kind: (typeof RETRIEVAL)[number], sent: number, body: unknown): string | undefined {
  if (kind === "rerank") {
    const { results } = body as { results: { index: number; relevance_score: number }[] };
    const indexes = results.map((result) => result.index).sort((a, b) => a - b);
    if (indexes.join() !== Array.from({ length: sent }, (_, i) => i).join()) return `rerank ranked ${indexes.join()} of ${sent} documents`;
    return results.some((result, i) => i > 0 && result.relevance_score > results[i - 1]!.relevance_score) ? "rerank results not best first" : undefined;
  }
  const vectors =
    kind === "embeddings" ? (body as { data: { embedding: number[] }[] }).data.map((item) => item.embedding) : (body as { embeddings: number[][] }).embeddings;
  if (vectors.length !== sent) return `${kind}: ${vectors.length} vectors for ${sent} inputs`;
  return vectors.every(isUnit) ? undefined : `${kind}: a vector not of length 1`;
}

/** One request of a retrieval client: its first three one of each kind, then drawn; a fifth left before the answer. */
export async function retrievalTurn(url: string, random: Random, key: string, signal: AbortSignal, turn: number): Promise<Ending> {
  const kind = RETRIEVAL[turn < RETRIEVAL.length ? turn : random.int(0, RETRIEVAL.length - 1)]!;
  const texts = Array.from({ length: random.int(1, 8) }, () => message(random));
  const [path, body] =
    kind === "embeddings"
      ? ["/v1/embeddings", { model: "parley-embed", input: texts }]
      : kind === "rerank"
        ? ["/v1/rerank", { model: "parley-rerank", query: message(random), documents: texts }]
        : ["/api/embed", { model: "parley-embed", input: texts }];
  const leave = new AbortController();
  if (turn >= RETRIEVAL.length && random.next() < 0.2) setTimeout(() => leave.abort(), random.int(0, 30));
  let response: Response;
  let answer: unknown;
  try {
    response = await post(`${url}${path}`, key, body, AbortSignal.any([signal, leave.signal]));
    answer = await response.json();
  } catch (error) {
    if (!leave.signal.aborted) throw error;
    return { ok: "retrieval left" };
  }
  if (response.status !== 200) return { failure: `${kind} ${response.status}: ${JSON.stringify(answer).slice(0, 200)}` };
  const problem = misshapen(kind, texts.length, answer);
  return problem === undefined ? { ok: kind } : { failure: problem };
}

/** One request of a legacy-completions client: a prompt continued, streamed half the time, a quarter of the streams left after a few chunks. */
export async function textCompletionTurn(url: string, random: Random, key: string, signal: AbortSignal, turn: number): Promise<Ending> {
  const { stream, cancelAfter } = drawTurn(random, turn);
  const leave = new AbortController();
  const body = { model: "parley", prompt: message(random), temperature: 0.8, max_tokens: random.int(4, 48), stream };
  const response = await post(`${url}/v1/completions`, key, body, AbortSignal.any([signal, leave.signal]));
  if (response.status !== 200) return { failure: `completions ${response.status}: ${(await response.text()).slice(0, 200)}` };
  if (!stream) {
    const { choices } = (await response.json()) as { choices: { finish_reason: string | null }[] };
    return choices[0]?.finish_reason ? { ok: "completions reply" } : { failure: "completions reply without a finish reason" };
  }
  const chunks: string[] = [];
  try {
    for await (const event of sseEvents(response)) {
      if (event.event === "comment") continue;
      chunks.push(event.data);
      if (chunks.length === cancelAfter) {
        leave.abort();
        return { ok: "completions cancelled" };
      }
    }
  } catch (error) {
    if (!leave.signal.aborted) throw error;
    return { ok: "completions cancelled" };
  }
  if (chunks.at(-1) !== "[DONE]") return { failure: `completions stream ended with ${chunks.at(-1)?.slice(0, 100)}` };
  if (chunks.some((chunk) => chunk.includes('"error"'))) return { failure: "completions stream with an error chunk" };
  return { ok: "completions stream" };
}
