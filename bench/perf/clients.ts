/**
 * One streamed chat turn against either server, timed on the client: time to first token and
 * the decode rate between the first and the last token.
 */
import { postChat } from "../../test/support/http";
import { sseEvents, type TimedEvent } from "../../test/support/sse";
import { ADMIN_KEY } from "./procs";

export interface Message {
  role: "system" | "user" | "assistant";
  content: string;
}

export interface TurnTiming {
  reply: string;
  /** ms from sending the request to the first token's arrival. */
  ttftMs: number;
  completionTokens: number;
  /** Tokens per second after the first token. */
  decodeTps: number;
  cachedTokens?: number;
  promptTokens?: number;
  /** performance.now() of the first and last token. */
  firstAt: number;
  lastAt: number;
}

/** The stream's events; its comments (heartbeats) say nothing about timing. */
async function* events(response: Response): AsyncGenerator<TimedEvent> {
  if (!response.ok || !response.body) throw new Error(`stream failed: HTTP ${response.status} ${await response.text()}`);
  for await (const event of sseEvents(response)) if (event.event !== "comment") yield event;
}

function timing(started: number, firstAt: number, lastAt: number, tokens: number, reply: string): TurnTiming {
  return {
    reply,
    ttftMs: firstAt - started,
    completionTokens: tokens,
    decodeTps: tokens > 1 && lastAt > firstAt ? ((tokens - 1) * 1000) / (lastAt - firstAt) : Number.NaN,
    firstAt,
    lastAt,
  };
}

/** Called once, when a stream's first token arrives: a scenario may wait for streams to be decoding. */
export type OnFirstToken = () => void;

/** Request fields both servers take alike, beside the ones each client sets (OpenAI's `response_format`). */
export type ExtraFields = Record<string, unknown>;

/** Parley: POST /api/v1.0/chat with `stream: true`; the server holds the history. */
export async function parleyTurn(
  url: string,
  conversationId: string,
  message: string,
  maxTokens: number,
  onFirstToken?: OnFirstToken,
  extra: ExtraFields = {},
): Promise<TurnTiming> {
  const started = performance.now();
  const response = await postChat(url, ADMIN_KEY, { message, conversation_id: conversationId, stream: true, temperature: 0, max_tokens: maxTokens, ...extra });
  let firstAt = Number.NaN;
  let lastAt = Number.NaN;
  let reply = "";
  for await (const event of events(response)) {
    if (event.event === "delta") {
      if (Number.isNaN(firstAt)) {
        firstAt = event.at;
        onFirstToken?.();
      }
      lastAt = event.at;
      reply += (JSON.parse(event.data) as { content: string }).content;
    } else if (event.event === "done") {
      const done = JSON.parse(event.data) as { usage: { completion_tokens: number; cached_tokens: number; prompt_tokens: number } };
      return {
        ...timing(started, firstAt, lastAt, done.usage.completion_tokens, reply),
        cachedTokens: done.usage.cached_tokens,
        promptTokens: done.usage.prompt_tokens,
      };
    } else if (event.event === "error") {
      throw new Error(`parley stream error: ${event.data}`);
    }
  }
  throw new Error("parley stream ended without done");
}

/** llama-server: OpenAI-style chat completion, streamed, with its prompt cache on. */
export const llamaServerTurn = (url: string, messages: readonly Message[], maxTokens: number, onFirstToken?: OnFirstToken, extra: ExtraFields = {}) =>
  completionTurn(url, {}, { messages, stream: true, temperature: 0, max_tokens: maxTokens, cache_prompt: true, ...extra }, onFirstToken);

/** Parley's chat completions, streamed, as llama-server's are asked (Parley caches prompts without being asked). */
export const parleyCompletionTurn = (url: string, messages: readonly unknown[], maxTokens: number) =>
  completionTurn(url, { authorization: `Bearer ${ADMIN_KEY}` }, { messages, stream: true, temperature: 0, max_tokens: maxTokens });

/** An OpenAI-style chat completion, streamed, timed. */
async function completionTurn(url: string, headers: Record<string, string>, body: object, onFirstToken?: OnFirstToken): Promise<TurnTiming> {
  const started = performance.now();
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  let firstAt = Number.NaN;
  let lastAt = Number.NaN;
  let reply = "";
  let chunks = 0;
  let predicted: number | undefined;
  let cached: number | undefined;
  for await (const event of events(response)) {
    if (event.data === "[DONE]") break;
    const chunk = JSON.parse(event.data) as {
      choices?: { delta?: { content?: string | null } }[];
      timings?: { predicted_n?: number; cache_n?: number };
    };
    const content = chunk.choices?.[0]?.delta?.content;
    if (content) {
      if (Number.isNaN(firstAt)) {
        firstAt = event.at;
        onFirstToken?.();
      }
      lastAt = event.at;
      reply += content;
      chunks++;
    }
    if (chunk.timings?.predicted_n !== undefined) predicted = chunk.timings.predicted_n;
    if (chunk.timings?.cache_n !== undefined) cached = chunk.timings.cache_n;
  }
  return { ...timing(started, firstAt, lastAt, predicted ?? chunks, reply), cachedTokens: cached };
}
