/** `/infill`'s answers, in llama-server's shape (its `/completion` result, not OpenAI-compatible). */
import type { CompletionResult, CompletionStart } from "../../chat/completions";
import type { TurnEvent } from "../../chat/turn-runner";
import { openAiErrorBody } from "../errors";
import { data, type SseChunk } from "../sse";
import type { Framing } from "../turn-driver";
import type { InfillChunk, InfillResponse } from "./contract";

/** Parley serves no numbered slots: llama-server's id of "none chosen". */
const NO_SLOT = -1;

/** When the prompt was evaluated and the reply began, seen from the turn's events. */
export class InfillClock {
  private admittedAt: number | undefined;
  private promptAt: number | undefined;

  seen(event: CompletionStart | TurnEvent): void {
    if (event.type === "start") this.admittedAt = performance.now();
    else if (event.type === "prompt") this.promptAt = performance.now();
  }

  /** llama-server's `timings`, the reply ending now: the prompt's tokens evaluated (those not cached) and the reply's. */
  timings(result: CompletionResult): InfillResponse["timings"] {
    const endedAt = performance.now();
    const promptAt = this.promptAt ?? endedAt;
    const promptMs = promptAt - (this.admittedAt ?? promptAt);
    const predictedMs = endedAt - promptAt;
    const { promptTokens, cachedTokens, completionTokens } = result.usage;
    const evaluated = promptTokens - cachedTokens;
    return {
      cache_n: cachedTokens,
      prompt_n: evaluated,
      prompt_ms: promptMs,
      prompt_per_token_ms: evaluated > 0 ? promptMs / evaluated : 0,
      prompt_per_second: promptMs > 0 ? (evaluated * 1000) / promptMs : 0,
      predicted_n: completionTokens,
      predicted_ms: predictedMs,
      predicted_per_token_ms: completionTokens > 0 ? predictedMs / completionTokens : 0,
      predicted_per_second: predictedMs > 0 ? (completionTokens * 1000) / predictedMs : 0,
    };
  }
}

/** llama-server's words for why the reply ended. */
function stopTypeOf(result: CompletionResult): InfillResponse["stop_type"] {
  if (result.finishReason === "length") return "limit";
  if (result.finishReason === "cancelled") return "none";
  return result.stopSequence !== undefined ? "word" : "eos";
}

/** The whole answer; a stream's last event has its text in the events before it. */
function final(result: CompletionResult, clock: InfillClock, content: string): InfillResponse {
  return {
    index: 0,
    content,
    tokens: [],
    id_slot: NO_SLOT,
    stop: true,
    model: result.model,
    tokens_predicted: result.usage.completionTokens,
    tokens_evaluated: result.usage.promptTokens,
    has_new_line: result.text.includes("\n"),
    truncated: false,
    stop_type: stopTypeOf(result),
    stopping_word: result.stopSequence ?? "",
    tokens_cached: result.usage.cachedTokens,
    timings: clock.timings(result),
  };
}

/**
 * With `response_fields`: only the values at those paths (`timings/prompt_n`), each under its path
 * as written, as llama-server's `json_get_nested_values` answers; a path to nothing is left out.
 */
export function picked(body: InfillResponse, paths: readonly string[] | undefined): InfillResponse | Record<string, unknown> {
  if (!paths?.length) return body;
  const out: Record<string, unknown> = {};
  for (const path of paths) {
    let value: unknown = body;
    for (const key of path.split("/"))
      value = value !== null && typeof value === "object" && Object.hasOwn(value, key) ? (value as Record<string, unknown>)[key] : undefined;
    if (value !== undefined) out[path] = value;
  }
  return out;
}

export const infillJson = (result: CompletionResult, clock: InfillClock, fields?: readonly string[]) => picked(final(result, clock, result.text), fields);

/** A stream of unnamed events, as llama-server's: a piece of the text each, then the counts and timings; no `[DONE]`. */
export function infillFraming(clock: InfillClock, fields?: readonly string[]): Framing<CompletionStart, CompletionResult> {
  let predicted = 0;
  let evaluated = 0;
  const piece = (content: string): InfillChunk => ({
    index: 0,
    content,
    tokens: [],
    stop: false,
    id_slot: NO_SLOT,
    tokens_predicted: ++predicted,
    tokens_evaluated: evaluated,
  });
  return {
    start: (start): SseChunk[] => {
      clock.seen(start);
      return [];
    },
    prompt: (prompt) => {
      clock.seen(prompt);
      evaluated = prompt.promptTokens;
      return [];
    },
    reasoning: () => [],
    delta: (content) => [data(piece(content))],
    done: (result) => [data(picked(final(result, clock, ""), fields))],
    error: (error) => [data(openAiErrorBody(error))],
  };
}
