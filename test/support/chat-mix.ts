/**
 * A chat service's mixed load against a running server, as its users make it: each client sends
 * one request at a time after a random pause, messages and reply lengths drawn at random, some
 * streams cancelled by the client after a few deltas; native-API clients keep two conversations
 * each, OpenAI-API clients resend a growing history (so their prompts share prefixes), some asking
 * for log-probabilities, structured-output clients ask for replies held to a JSON schema, and
 * tool clients offer a tool whose call may be required, named or up to the model, Responses-API
 * clients chain kept responses, some generated in the background and resumed after leaving their
 * stream, some streams cancelled, Anthropic- and Ollama-API clients resend a growing history, some
 * streams cancelled, retrieval and legacy-completions clients (retrieval-mix.ts) embed, rerank
 * and have prompts continued, and picture clients send native turns to a model that sees pictures,
 * about every other one with a picture, some streams cancelled. Every request must end cleanly: 200 and a
 * whole reply (`done`, `[DONE]` with no error chunk, or `message_stop` after blocks each started
 * and stopped), or a stream this client cancelled; a
 * structured reply or a call that ended by itself must be valid against its schema, and a call
 * that had to be made must have been.
 */
import Ajv2020 from "ajv/dist/2020";
import { bearer, postChat } from "./http";
import { drawTurn, type Ending, message } from "./mix-draws";
import { png } from "./png";
import { type Random, seededRandom } from "./random";
import { retrievalTurn, textCompletionTurn } from "./retrieval-mix";
import { sseEvents } from "./sse";

export interface ChatMixOptions {
  url: string;
  /** One key a client (client i uses keys[i % keys.length]). */
  keys: string[];
  nativeClients: number;
  openaiClients: number;
  /** OpenAI-API clients, as `openaiClients`, asking for their tokens' log-probabilities. */
  logprobsClients?: number;
  /** OpenAI-API clients whose replies are held to `STRUCTURED_SCHEMA`. */
  structuredClients?: number;
  /** OpenAI-API clients offering a tool, its call required, named or up to the model. */
  toolClients?: number;
  /**
   * Responses-API clients chaining kept responses: some in the background, left after a few
   * deltas and resumed with `starting_after`; some foreground streams cancelled (a new chain then).
   */
  responsesClients?: number;
  /** Anthropic-API clients resending a growing history, streamed or not, some streams cancelled. */
  anthropicClients?: number;
  /** Ollama-API clients resending a growing history, one JSON object a line or not, some streams cancelled. */
  ollamaClients?: number;
  /** Clients embedding texts and reranking documents (retrieval-mix.ts): the service serves `parley-embed` and `parley-rerank`. */
  retrievalClients?: number;
  /** Legacy-completions clients (retrieval-mix.ts). */
  completionClients?: number;
  /** Native-API clients of `pictureModel` (a model that sees pictures), every other message or so with a picture of random size and colours. */
  pictureClients?: number;
  pictureModel?: string;
  durationMs: number;
  /** A request not ended by then counts as hung. */
  deadlineMs: number;
  /** Each client draws from its own generator, seeded from this one's seed: a seed replays the same requests. */
  random: Random;
}

export interface ChatMixResult {
  requests: number;
  /** Requests that ended as they should, by kind. */
  ok: Record<string, number>;
  /** Every other ending, described. */
  failures: string[];
  /** Prompt tokens the OpenAI- and Anthropic-API replies reported as reused. */
  cachedTokens: number;
}

/** Nested objects, an array and an enum: what a structured-output client asks for. */
export const STRUCTURED_SCHEMA = {
  type: "object",
  properties: {
    title: { type: "string", maxLength: 40 },
    author: {
      type: "object",
      properties: { name: { type: "string", maxLength: 20 }, born: { type: "integer" } },
      required: ["name", "born"],
      additionalProperties: false,
    },
    tags: { type: "array", items: { type: "string", maxLength: 12 }, maxItems: 3 },
    kind: { enum: ["story", "poem", "essay"] },
  },
  required: ["title", "author", "tags", "kind"],
  additionalProperties: false,
};

/** A tool client's tool: short calls, so that most end by themselves within their `max_tokens`. */
const TOOL_PARAMETERS = {
  type: "object",
  properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer" } },
  required: ["city", "days"],
  additionalProperties: false,
};

const ajv = new Ajv2020({ strict: false });
const validStructured = ajv.compile(STRUCTURED_SCHEMA);
const validToolCall = ajv.compile(TOOL_PARAMETERS);

/**
 * A native turn, streamed; some cancelled: a client's first left after its first piece, its second
 * read whole, whatever the draws after them. `kind` names its endings; `extra` adds to its request
 * (a picture client's model and pictures).
 */
async function nativeTurn(
  options: ChatMixOptions,
  random: Random,
  key: string,
  conversation: string,
  signal: AbortSignal,
  turn: number,
  kind = "native",
  extra: Record<string, unknown> = {},
): Promise<Ending> {
  const cancelAfter = turn === 0 ? 1 : turn > 1 && random.next() < 0.25 ? random.int(1, 5) : undefined;
  const cancel = new AbortController();
  const body = { message: message(random), conversation_id: conversation, stream: true, temperature: 0.8, max_tokens: random.int(4, 63), ...extra };
  const response = await postChat(options.url, key, body, AbortSignal.any([signal, cancel.signal]));
  if (response.status !== 200) return { failure: `${kind} ${response.status}: ${(await response.text()).slice(0, 200)}` };
  let deltas = 0;
  let last = "";
  try {
    for await (const event of sseEvents(response)) {
      if (event.event === "comment") continue;
      last = event.event;
      if (last === "error") return { failure: `${kind} stream error: ${event.data.slice(0, 200)}` };
      if (last === "delta" && ++deltas === cancelAfter) {
        cancel.abort();
        return { ok: `${kind} cancelled` };
      }
    }
  } catch (error) {
    if (cancel.signal.aborted) return { ok: `${kind} cancelled` };
    throw error;
  }
  return last === "done" ? { ok: `${kind} stream` } : { failure: `${kind} stream ended with ${last || "nothing"}` };
}

/** A picture client's request: its model, and about every other message a picture of random size and colours. */
function pictureFields(options: ChatMixOptions, random: Random): Record<string, unknown> {
  if (random.next() < 0.5) return { model: options.pictureModel };
  const [r, g, b] = [random.int(0, 255), random.int(0, 255), random.int(0, 255)];
  const picture = png(random.int(8, 80), random.int(8, 80), (x, y) => [(r + x * 7) % 256, (g + y * 5) % 256, b]);
  return { model: options.pictureModel, images: [Buffer.from(picture).toString("base64")] };
}

type OpenAiKind = "openai" | "logprobs" | "structured" | "tools";

/** What a client of each kind adds to its request. */
function requestFields(kind: OpenAiKind, random: Random, turn: number): Record<string, unknown> {
  switch (kind) {
    case "openai":
      return { max_tokens: random.int(4, 63) };
    case "logprobs":
      // Replies that decode a batch per token beside those that step.
      return { max_tokens: random.int(4, 63), logprobs: true, top_logprobs: random.int(0, 5) };
    case "structured":
      return { max_tokens: random.int(20, 120), response_format: { type: "json_schema", json_schema: { name: "work", schema: STRUCTURED_SCHEMA } } };
    case "tools": {
      // Calls made more often than not: each level must see some end by themselves, so a client's
      // first request is a call with room enough whatever the draws after it (a short run may
      // make only a few requests).
      const choice = turn === 0 ? "required" : random.pick(["auto", "required", "required", { type: "function", function: { name: "get_weather" } }]);
      return {
        // A call takes ~90 tokens of bench-small (more with parallel calls), which under "auto"
        // writes words instead, at length.
        max_tokens: choice === "auto" ? random.int(4, 63) : turn === 0 ? 400 : random.int(100, 260),
        tools: [{ type: "function", function: { name: "get_weather", description: "The weather in a city", parameters: TOOL_PARAMETERS } }],
        tool_choice: choice,
        parallel_tool_calls: random.next() < 0.5,
      };
    }
  }
}

interface Chunk {
  error?: unknown;
  choices?: {
    delta?: { content?: string; tool_calls?: ToolCallPiece[] };
    message?: { content?: string | null; tool_calls?: ToolCallPiece[] };
    logprobs?: { content: { token: string }[] | null } | null;
    finish_reason?: string | null;
  }[];
  usage?: { prompt_tokens_details?: { cached_tokens?: number } };
}

interface ToolCallPiece {
  index?: number;
  id?: string;
  function?: { name?: string; arguments?: string };
}

/** The calls of a reply, whole or reassembled from its chunks' pieces. */
function toolCallsOf(chunks: readonly Chunk[]): { name: string; arguments: string }[] {
  const calls: { name: string; arguments: string }[] = [];
  for (const chunk of chunks) {
    const choice = chunk.choices?.[0];
    for (const [i, piece] of (choice?.message?.tool_calls ?? choice?.delta?.tool_calls ?? []).entries()) {
      const call = (calls[piece.index ?? i] ??= { name: "", arguments: "" });
      call.name += piece.function?.name ?? "";
      call.arguments += piece.function?.arguments ?? "";
    }
  }
  return calls;
}

/**
 * Whether `text` is JSON that `valid` accepts, as the grammar counted it: an overlong UTF-8
 * sequence counts as one character there and shows as several U+FFFD (docs/API.md, Structured output).
 */
function validJson(valid: (value: unknown) => boolean, text: string): boolean {
  try {
    return valid(JSON.parse(text.replace(/\uFFFD+/g, "\uFFFD")));
  } catch {
    return false;
  }
}

/** How a reply held to a schema ended: it must be valid unless cut, and a call that had to be made must be there. */
function judge(kind: OpenAiKind, chunks: readonly Chunk[], reply: string, body: Record<string, unknown>): Ending | undefined {
  const finish = chunks.map((chunk) => chunk.choices?.[0]?.finish_reason).findLast((reason) => reason);
  if (kind === "structured") {
    if (finish === "length") return { ok: "structured cut" };
    return validJson(validStructured, reply) ? { ok: "structured" } : { failure: `structured ${finish}: not valid against its schema: ${reply.slice(0, 200)}` };
  }
  if (kind !== "tools") return undefined;
  if (reply.includes("<tool_call>")) return { failure: `tools: call markup in content: ${reply.slice(0, 200)}` };
  if (finish === "length") return { ok: "tools cut" };
  const calls = toolCallsOf(chunks);
  if (finish === "stop" && calls.length === 0 && body.tool_choice === "auto") return { ok: "tools answered" };
  if (finish !== "tool_calls" || calls.length === 0)
    return { failure: `tools ${finish}: ${calls.length} calls under tool_choice ${JSON.stringify(body.tool_choice)}` };
  if (body.parallel_tool_calls === false && calls.length > 1) return { failure: `tools: ${calls.length} calls with parallel_tool_calls false` };
  const bad = calls.find((call) => call.name !== "get_weather" || !validJson(validToolCall, call.arguments));
  return bad ? { failure: `tools: a call not valid against its schema: ${JSON.stringify(bad).slice(0, 200)}` } : { ok: "tool call" };
}

async function openaiTurn(
  options: ChatMixOptions,
  random: Random,
  key: string,
  history: { role: string; content: string }[],
  signal: AbortSignal,
  kind: OpenAiKind,
  turn: number,
): Promise<Ending> {
  // A client's first request a reply, its second a stream, whatever the draws after them.
  const stream = turn < 2 ? turn === 1 : random.next() < 0.5;
  history.push({ role: "user", content: message(random) });
  const body = {
    model: "parley",
    messages: history,
    stream,
    temperature: 0.8,
    ...requestFields(kind, random, turn),
    ...(stream ? { stream_options: { include_usage: true } } : {}),
  };
  const response = await fetch(`${options.url}/v1/chat/completions`, {
    method: "POST",
    headers: { ...bearer(key), "content-type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
  if (response.status !== 200) return { failure: `openai ${response.status}: ${(await response.text()).slice(0, 200)}` };
  const chunks: Chunk[] = [];
  let done = false;
  if (stream) {
    for await (const event of sseEvents(response)) {
      if (event.event === "comment") continue;
      if (event.data === "[DONE]") done = true;
      else chunks.push(JSON.parse(event.data) as Chunk);
    }
  } else {
    chunks.push((await response.json()) as Chunk);
    done = true;
  }
  const failed = chunks.find((chunk) => chunk.error !== undefined);
  if (failed || !done)
    return { failure: `openai ${stream ? "stream" : "reply"} ${failed ? `error: ${JSON.stringify(failed.error).slice(0, 200)}` : "without [DONE]"}` };
  const reply = chunks.map((chunk) => chunk.choices?.[0]?.message?.content ?? chunk.choices?.[0]?.delta?.content ?? "").join("");
  const judged = judge(kind, chunks, reply, body);
  if (judged) return judged;
  if (kind === "logprobs") {
    // The entries spell the reply (leading spaces aside: a first SentencePiece token's), or as much of it as they reached.
    const spelled = chunks
      .flatMap((chunk) => chunk.choices?.[0]?.logprobs?.content ?? [])
      .map((entry) => entry.token)
      .join("")
      .trimStart();
    const text = reply.trimStart();
    if ((text !== "" && spelled === "") || !text.startsWith(spelled))
      return { failure: `openai logprobs spell ${JSON.stringify(spelled.slice(0, 80))}, the reply is ${JSON.stringify(reply.slice(0, 80))}` };
  }
  remember(history, reply);
  const ok = kind === "logprobs" ? "openai logprobs" : stream ? "openai stream" : "openai reply";
  return { ok, cached: chunks.at(-1)?.usage?.prompt_tokens_details?.cached_tokens ?? 0 };
}

interface AnthropicEventData {
  type: string;
  delta?: { type: string; text?: string };
  error?: unknown;
}

/** The reply joins the history; a history that outgrows the context starts over, as a user's new chat would. */
function remember(history: { role: string; content: string }[], reply: string): void {
  history.push({ role: "assistant", content: reply });
  if (history.length > 16) history.splice(0);
}

/**
 * One turn of an Anthropic-API client: its history with a new message, streamed half the time (a
 * quarter of the streams left after a few text deltas) once its first two requests are made. A stream must run from `message_start` to
 * `message_stop`, each block started and stopped, with no error event.
 */
async function anthropicTurn(
  options: ChatMixOptions,
  random: Random,
  key: string,
  history: { role: string; content: string }[],
  signal: AbortSignal,
  turn: number,
): Promise<Ending> {
  const { stream, cancelAfter } = drawTurn(random, turn);
  const cancel = new AbortController();
  history.push({ role: "user", content: message(random) });
  const body = { model: "parley", messages: history, stream, temperature: 0.8, max_tokens: random.int(4, 63) };
  const response = await fetch(`${options.url}/v1/messages`, {
    method: "POST",
    headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.any([signal, cancel.signal]),
  });
  if (response.status !== 200) return { failure: `anthropic ${response.status}: ${(await response.text()).slice(0, 200)}` };
  let reply = "";
  let cached = 0;
  if (stream) {
    const events: AnthropicEventData[] = [];
    let deltas = 0;
    try {
      for await (const event of sseEvents(response)) {
        // Until message_start (the prompt evaluated) a wait is kept alive by comment lines; after it, by ping events.
        if (event.event === "comment") {
          if (events.length > 0) return { failure: "anthropic stream: a comment line where Anthropic's ping events go" };
          continue;
        }
        const data = JSON.parse(event.data) as AnthropicEventData;
        if (data.type !== event.event) return { failure: `anthropic stream: event ${event.event} carries ${data.type}` };
        if (data.type === "error") return { failure: `anthropic stream error: ${JSON.stringify(data.error).slice(0, 200)}` };
        events.push(data);
        if (data.delta?.type !== "text_delta") continue;
        reply += data.delta.text;
        if (++deltas === cancelAfter) {
          cancel.abort();
          history.pop();
          return { ok: "anthropic cancelled" };
        }
      }
    } catch (error) {
      if (!cancel.signal.aborted) throw error;
      history.pop();
      return { ok: "anthropic cancelled" };
    }
    const types = events.map((event) => event.type).filter((type) => type !== "ping");
    const count = (type: string) => types.filter((seen) => seen === type).length;
    if (types[0] !== "message_start" || types.at(-1) !== "message_stop" || count("content_block_start") !== count("content_block_stop")) {
      return { failure: `anthropic stream out of shape: ${types.join(",").slice(0, 200)}` };
    }
  } else {
    const message = (await response.json()) as {
      type: string;
      stop_reason: string;
      content: { type: string; text?: string }[];
      usage: { cache_read_input_tokens: number };
    };
    if (message.type !== "message" || !["end_turn", "max_tokens"].includes(message.stop_reason))
      return { failure: `anthropic reply ${message.type} ${message.stop_reason}` };
    reply = message.content.flatMap((block) => (block.type === "text" ? [block.text!] : [])).join("");
    cached = message.usage.cache_read_input_tokens;
  }
  remember(history, reply);
  return { ok: stream ? "anthropic stream" : "anthropic reply", cached };
}

/**
 * One turn of an Ollama-API client: its history with a new message, streamed (Ollama's default:
 * one JSON object a line) half the time once its first two requests are made, a quarter of the
 * streams left after a few lines. A stream's every line is an object; the last, alone, is `done`.
 */
async function ollamaTurn(
  options: ChatMixOptions,
  random: Random,
  key: string,
  history: { role: string; content: string }[],
  signal: AbortSignal,
  turn: number,
): Promise<Ending> {
  const { stream, cancelAfter } = drawTurn(random, turn);
  const cancel = new AbortController();
  history.push({ role: "user", content: message(random) });
  const body = { model: "parley", messages: history, stream, options: { temperature: 0.8, num_predict: random.int(4, 63) } };
  const response = await fetch(`${options.url}/api/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}` },
    body: JSON.stringify(body),
    signal: AbortSignal.any([signal, cancel.signal]),
  });
  if (response.status !== 200) return { failure: `ollama ${response.status}: ${(await response.text()).slice(0, 200)}` };
  type Line = { message?: { content: string }; done?: boolean; error?: string };
  let lines: Line[];
  try {
    if (!stream) lines = [(await response.json()) as Line];
    else {
      lines = [];
      let text = "";
      for await (const chunk of response.body!.pipeThrough(new TextDecoderStream())) {
        text += chunk;
        const whole = text.split("\n");
        text = whole.pop()!;
        lines.push(...whole.filter((line) => line !== "").map((line) => JSON.parse(line) as Line));
        if (lines.length >= (cancelAfter ?? Infinity)) {
          cancel.abort();
          history.pop();
          return { ok: "ollama cancelled" };
        }
      }
      if (text !== "") return { failure: `ollama stream: a line without its newline: ${text.slice(0, 100)}` };
    }
  } catch (error) {
    if (!cancel.signal.aborted) throw error;
    history.pop();
    return { ok: "ollama cancelled" };
  }
  const failed = lines.find((line) => line.error !== undefined);
  if (failed) return { failure: `ollama error line: ${failed.error}` };
  if (lines.at(-1)?.done !== true || lines.slice(0, -1).some((line) => line.done))
    return { failure: "ollama stream out of shape: done is not the last line alone" };
  remember(history, lines.map((line) => line.message?.content ?? "").join(""));
  return { ok: stream ? "ollama stream" : "ollama reply" };
}

interface ResponseEventData {
  type: string;
  sequence_number: number;
  delta?: string;
  response?: { id: string; output: { type: string; content?: { text: string }[] }[] };
}

/** The events of a Responses stream, until `leave` says to; with the last one's number. */
async function responseEvents(response: Response, leave: (events: ResponseEventData[]) => boolean): Promise<ResponseEventData[]> {
  const events: ResponseEventData[] = [];
  for await (const event of sseEvents(response)) {
    if (event.event === "comment") continue;
    events.push(JSON.parse(event.data) as ResponseEventData);
    if (leave(events)) break;
  }
  return events;
}

const RESPONSE_ENDINGS = ["response.completed", "response.incomplete"];

/**
 * One turn of a Responses client: the next response of its chain (`chain.previous`), streamed or
 * not; in the background a third of the time, its stream left after a few deltas and resumed.
 * A stream it cancels ends its chain. The text streamed must be the text kept.
 */
async function responsesTurn(
  options: ChatMixOptions,
  random: Random,
  key: string,
  chain: { previous?: string },
  signal: AbortSignal,
  turn: number,
): Promise<Ending> {
  // A client's first three requests are a plain reply, a background stream and a stream, whatever
  // the draws after them: a short run may make only a few.
  const drawn = turn > 2;
  const background = drawn ? random.next() < 0.35 : turn === 1;
  const stream = background || (drawn ? random.next() < 0.6 : turn === 2);
  const body = {
    model: "parley",
    input: message(random),
    temperature: 0.8,
    max_output_tokens: random.int(4, 48),
    stream,
    background,
    ...(chain.previous ? { previous_response_id: chain.previous } : {}),
  };
  const post = (path: string, method = "GET", sent?: unknown) =>
    fetch(`${options.url}/v1${path}`, {
      method,
      headers: { ...bearer(key), "content-type": "application/json" },
      body: sent === undefined ? undefined : JSON.stringify(sent),
      signal,
    });
  const response = await post("/responses", "POST", body);
  if (response.status !== 200) return { failure: `responses ${response.status}: ${(await response.text()).slice(0, 200)}` };
  if (!stream) {
    const kept = (await response.json()) as { id: string; status: string };
    if (kept.status !== "completed" && kept.status !== "incomplete") return { failure: `responses reply ${kept.status}` };
    chain.previous = kept.id;
    return { ok: "responses reply" };
  }
  const leaveAfter = drawn && random.next() < 0.5 ? random.int(1, 4) : undefined;
  const deltasIn = (events: ResponseEventData[]) => events.filter((event) => event.type === "response.output_text.delta").length;
  // Leaving the loop closes the body: the client is gone.
  const events = await responseEvents(response, (seen) => deltasIn(seen) === leaveAfter);
  const id = events[0]?.response?.id;
  if (id === undefined) return { failure: "responses stream without response.created" };
  if (leaveAfter !== undefined && deltasIn(events) === leaveAfter && !RESPONSE_ENDINGS.includes(events.at(-1)!.type)) {
    if (!background) {
      // Left a foreground stream: that cancels it, and this chain ends with it.
      chain.previous = undefined;
      return { ok: "responses cancelled" };
    }
    events.push(...(await responseEvents(await post(`/responses/${id}?stream=true&starting_after=${events.at(-1)!.sequence_number}`), () => false)));
  }
  const last = events.at(-1)!;
  if (!RESPONSE_ENDINGS.includes(last.type)) return { failure: `responses stream ended with ${last.type}` };
  if (events.some((event, i) => event.sequence_number !== i)) return { failure: "responses stream events out of order or missing" };
  const streamed = events.flatMap((event) => (event.type === "response.output_text.delta" ? [event.delta!] : [])).join("");
  const kept = last.response!.output.find((item) => item.type === "message")?.content?.[0]?.text ?? "";
  if (streamed !== kept) return { failure: `responses streamed ${JSON.stringify(streamed.slice(0, 60))}, kept ${JSON.stringify(kept.slice(0, 60))}` };
  chain.previous = id;
  return { ok: background ? (leaveAfter !== undefined ? "responses resumed" : "responses background") : "responses stream" };
}

/**
 * The turns every client makes however short the run: each kind of client's first turns are one
 * of each ending a test may require of it (a retrieval client's three kinds, a Responses client's
 * reply, background stream and stream, a native client's cancelled and whole streams).
 */
const FIXED_TURNS = 3;

export async function runChatMix(options: ChatMixOptions): Promise<ChatMixResult> {
  const result: ChatMixResult = { requests: 0, ok: {}, failures: [], cachedTokens: 0 };
  const endAt = Date.now() + options.durationMs;
  const kinds = [
    ...Array<"native">(options.nativeClients).fill("native"),
    ...Array<OpenAiKind>(options.openaiClients).fill("openai"),
    ...Array<OpenAiKind>(options.logprobsClients ?? 0).fill("logprobs"),
    ...Array<OpenAiKind>(options.structuredClients ?? 0).fill("structured"),
    ...Array<OpenAiKind>(options.toolClients ?? 0).fill("tools"),
    ...Array<"responses">(options.responsesClients ?? 0).fill("responses"),
    ...Array<"anthropic">(options.anthropicClients ?? 0).fill("anthropic"),
    ...Array<"ollama">(options.ollamaClients ?? 0).fill("ollama"),
    ...Array<"retrieval">(options.retrievalClients ?? 0).fill("retrieval"),
    ...Array<"completions">(options.completionClients ?? 0).fill("completions"),
    ...Array<"pictures">(options.pictureClients ?? 0).fill("pictures"),
  ];
  await Promise.all(
    kinds.map(async (kind, client) => {
      const key = options.keys[client % options.keys.length]!;
      const history: { role: string; content: string }[] = [];
      const chain: { previous?: string } = {};
      const random = seededRandom((options.random.seed + Math.imul(client + 1, 0x9e3779b9)) >>> 0);
      // Past the run's end a client still makes its first turns, each of a kind it must show.
      for (let turn = 0; turn < FIXED_TURNS || Date.now() < endAt; turn++) {
        // The client's pause before its next request: arrivals at random moments.
        await Bun.sleep(random.int(0, 300));
        const signal = AbortSignal.timeout(options.deadlineMs);
        let ending: Ending;
        try {
          ending =
            kind === "native"
              ? await nativeTurn(options, random, key, `mix-${client}-${turn % 2}`, signal, turn)
              : kind === "pictures"
                ? await nativeTurn(options, random, key, `pictures-${client}-${turn % 2}`, signal, turn, "pictures", pictureFields(options, random))
                : kind === "responses"
                  ? await responsesTurn(options, random, key, chain, signal, turn)
                  : kind === "anthropic"
                    ? await anthropicTurn(options, random, key, history, signal, turn)
                    : kind === "ollama"
                      ? await ollamaTurn(options, random, key, history, signal, turn)
                      : kind === "retrieval"
                        ? await retrievalTurn(options.url, random, key, signal, turn)
                        : kind === "completions"
                          ? await textCompletionTurn(options.url, random, key, signal, turn)
                          : await openaiTurn(options, random, key, kind === "openai" || kind === "logprobs" ? history : [], signal, kind, turn);
        } catch (error) {
          ending = { failure: `${kind} client: ${signal.aborted ? `hung past ${options.deadlineMs} ms` : `connection: ${String(error)}`}` };
        }
        result.requests++;
        if ("ok" in ending) {
          result.ok[ending.ok] = (result.ok[ending.ok] ?? 0) + 1;
          result.cachedTokens += ending.cached ?? 0;
        } else {
          result.failures.push(ending.failure);
        }
      }
    }),
  );
  return result;
}
