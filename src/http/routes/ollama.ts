/**
 * Ollama's API, a fourth framing of the same stateless turn: `/api/chat` and `/api/generate`
 * (newline-delimited JSON by default, one object with `stream: false`), and the model listing its
 * clients read (`/api/tags`, `/api/ps`, `/api/show`, `/api/version`). Keys as `Authorization:
 * Bearer`, as Ollama's clients send them to a keyed server; errors in Ollama's shape (errors.ts).
 * Verbs that would change the model files are refused: the operator manages them.
 */
import { Elysia } from "elysia";
import pkg from "../../../package.json";
import type { CompletionInput, CompletionStart } from "../../chat/completions";
import type { RetrievalService } from "../../chat/retrieval";
import type { TurnEvent } from "../../chat/turn-runner";
import type { Principal } from "../../db/types";
import { Forbidden, InvalidInput, ModelNotFound } from "../../errors";
import type { ReplyFormat, ToolCall, Turn } from "../../llm/engine";
import type { Logger } from "../../log";
import type { Metrics } from "../../metrics";
import { requireKey } from "../auth";
import { namingFields } from "../field-names";
import { jsonBody } from "../json-body";
import { toolRequestOf } from "../offered-tools";
import {
  HONOURED_OPTIONS,
  OllamaChatRequest,
  OllamaEmbeddingsRequest,
  OllamaEmbedRequest,
  OllamaGenerateRequest,
  type OllamaOptions,
  OllamaShowRequest,
} from "../ollama/contract";
import { ollamaFields, ollamaGenerateFields } from "../ollama/fields";
import { ignoredFields, Leniency } from "../ollama/ignored";
import { servedId } from "../ollama/names";
import { embedJson, loadedJson, loadedModelJson, modelJson, type OllamaRoute, ollamaFraming, ReplyClock, replyJson, showJson } from "../ollama/present";
import { jsonResponse, ndjsonResponse, ollamaErrorResponses, RETRIEVAL_REFUSALS, TURN_REFUSALS } from "../openapi";
import { RequestPictures } from "../pictures";
import { contextOf } from "../request-context";
import { samplingFieldsOf } from "../sampling-fields";
import { type CompletionRouteDeps, type Exchange, hooksOf, type RequestHooks, watched } from "../turn-driver";

const TAGS = ["Ollama-compatible"];

type TurnRequest = Pick<OllamaChatRequest, "model" | "format" | "options" | "think" | "keep_alive">;
type Message = OllamaChatRequest["messages"][number];

/** Ollama's default temperature, where the request sets none. */
const DEFAULT_TEMPERATURE = 0.8;

/**
 * The messages as turns. Ollama's calls carry no id: each is given one, and a tool's message
 * answers the earliest call still unanswered of the function it names (of any, naming none).
 */
function turnsOf(messages: readonly Message[]): Turn[] {
  let pending: ToolCall[] = [];
  const pictures = new RequestPictures();
  return messages.map((message, i): Turn => {
    if (message.images?.length && message.role !== "user") throw new InvalidInput(`messages[${i}].images`, "only a user message may have pictures");
    if (!message.content.isWellFormed() || !(message.thinking ?? "").isWellFormed())
      throw new InvalidInput({ part: "history", item: i }, "a message's content and thinking must be valid Unicode text");
    if (message.role === "tool") {
      const answered = pending.findIndex((call) => message.tool_name === undefined || call.name === message.tool_name);
      if (answered < 0)
        throw new InvalidInput({ part: "history", item: i, detail: "answers" }, "a tool's message must answer a call an earlier assistant message made");
      const [call] = pending.splice(answered, 1);
      return { role: "tool", content: message.content, toolCallId: call!.id, name: call!.name };
    }
    if (message.tool_calls && message.role !== "assistant") throw new InvalidInput({ part: "history", item: i }, "tool_calls belong to an assistant message");
    if (message.role !== "assistant")
      return { role: message.role, content: message.content, ...pictures.after(message.content, message.images, `messages[${i}].images`) };
    pending = (message.tool_calls ?? []).map((call, j) => ({
      id: `call_${i}_${j}`,
      name: call.function.name,
      arguments: JSON.stringify(call.function.arguments),
    }));
    return {
      role: "assistant",
      content: message.content,
      ...(message.thinking ? { reasoning: message.thinking } : {}),
      ...(pending.length > 0 ? { toolCalls: pending } : {}),
    };
  });
}

/** `format`: `"json"` is any JSON object; a schema is held as far as the grammar can (its other keywords advisory, as OpenAI's non-strict). */
const formatOf = (format: TurnRequest["format"]): ReplyFormat | undefined =>
  format === undefined ? undefined : format === "json" ? { type: "json_object" } : { type: "json_schema", schema: format, strict: false };

const DURATION_UNITS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 };

/**
 * `keep_alive` as Ollama reads it: seconds as a number (or digits), else a Go duration ("5m",
 * "1h30m", "300ms"); below zero, for ever (-1). Within the operator's keep-alive (loaded-models.ts).
 */
function keepAliveMsOf(value: string | number | undefined): number | undefined {
  if (value === undefined) return undefined;
  const text = String(value).trim();
  if (typeof value === "number" || /^-?\d+(\.\d+)?$/.test(text)) {
    const seconds = Number(text);
    return seconds < 0 ? -1 : Math.round(seconds * 1000);
  }
  const parts = /^(-?)((?:\d+(?:\.\d+)?(?:ms|s|m|h))+)$/.exec(text);
  if (!parts) throw new InvalidInput("keep_alive", 'must be a duration ("5m", "1h30m", "300ms") or a number of seconds; below zero keeps the model loaded');
  if (parts[1] === "-") return -1;
  let ms = 0;
  for (const [, amount, unit] of parts[2]!.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)) ms += Number(amount) * DURATION_UNITS[unit!]!;
  return Math.round(ms);
}

const keepAlive = (value: string | number | undefined) => {
  const keepAliveMs = keepAliveMsOf(value);
  return keepAliveMs === undefined ? {} : { keepAliveMs };
};

/** No option changes an embedding: every one is ignored. */
const NO_OPTIONS: ReadonlySet<string> = new Set();

/** `repeat_last_n`: 0 counts none, -1 the whole reply (Ollama's "the context"; the engine bounds it by the context). */
const penaltyWindowOf = (lastN: number | null | undefined) => (lastN == null ? {} : { penaltyWindow: lastN < 0 ? Number.POSITIVE_INFINITY : lastN });

/** The request's fields as the turn takes them, beside its history. */
function turnInput(body: TurnRequest, messages: Turn[], tools: OllamaChatRequest["tools"]): Omit<CompletionInput, "signal" | "userId"> {
  const options: OllamaOptions = body.options ?? {};
  const predict = options.num_predict ?? -1;
  if (predict === 0) throw new InvalidInput("options.num_predict", "options.num_predict must be at least 1, or -1 for as long as the context allows");
  const stop = options.stop ?? [];
  if (!stop.every((text) => text.isWellFormed())) throw new InvalidInput("options.stop", "options.stop must be valid Unicode text");
  const format = formatOf(body.format);
  const offered = toolRequestOf({
    functions: (tools ?? []).map((tool) => ({
      name: tool.function.name,
      description: tool.function.description,
      parameters: tool.function.parameters,
      strict: false,
    })),
    choice: undefined,
    parallel: true,
  });
  return {
    messages,
    model: body.model,
    ...keepAlive(body.keep_alive),
    sampling: {
      temperature: options.temperature ?? DEFAULT_TEMPERATURE,
      ...(options.seed != null ? { seed: options.seed } : {}),
      // Named one by one: an option Ollama does not have (`logit_bias`) is ignored, not read.
      ...samplingFieldsOf({
        top_p: options.top_p,
        top_k: options.top_k,
        min_p: options.min_p,
        repeat_penalty: options.repeat_penalty,
        presence_penalty: options.presence_penalty,
        frequency_penalty: options.frequency_penalty,
      }),
      ...penaltyWindowOf(options.repeat_last_n),
    },
    ...(predict > 0 ? { maxTokens: predict } : {}),
    ...(options.num_ctx != null ? { contextTokens: options.num_ctx } : {}),
    ...(stop.length > 0 ? { stop } : {}),
    ...(format ? { format } : {}),
    ...(offered ? { tools: offered } : {}),
    ...(body.think === false ? { thoughtTokens: 0 } : {}),
  };
}

type GenerateRequest = OllamaGenerateRequest;

/**
 * What `/api/generate` asks the model: the prompt through the chat template; with `raw`, as written;
 * with a `suffix`, filled in between (`llm/infill.ts`, a model with FIM tokens), as Ollama's FIM
 * models' templates frame it. Beside either, the fields Ollama ignores then (a raw prompt's suffix,
 * a suffix's system message) are in `ignored`; those it could not honour are refused.
 */
function generated(body: GenerateRequest): { input: Omit<CompletionInput, "signal" | "userId">; ignored: string[] } {
  const suffix = body.suffix ?? "";
  if (body.raw !== true && suffix === "") {
    const messages: Turn[] = [
      ...(body.system ? [{ role: "system" as const, content: body.system }] : []),
      { role: "user", content: body.prompt, ...new RequestPictures().after(body.prompt, body.images, "images") },
    ];
    if (!messages.every((turn) => turn.content.isWellFormed())) throw new InvalidInput("prompt", "prompt and system must be valid Unicode text");
    return { input: turnInput(body, messages, undefined), ignored: [] };
  }
  const mode = body.raw === true ? "raw" : "suffix";
  // As Ollama's server: a raw prompt has no system message (its template would write it).
  if (body.raw === true && body.system !== undefined) throw new InvalidInput("system", "raw takes the prompt as written: put any system text in it");
  if (body.images?.length) throw new InvalidInput("images", `a prompt with ${mode} is text only here: send pictures through the chat template`);
  if (body.format !== undefined) throw new InvalidInput("format", `a reply to a prompt with ${mode} is not held to a format here`);
  if (![body.prompt, suffix].every((text) => text.isWellFormed())) throw new InvalidInput("prompt", "prompt and suffix must be valid Unicode text");
  const input = turnInput(body, [], undefined);
  if (body.raw === true) return { input: { ...input, raw: body.prompt }, ignored: suffix === "" ? [] : ["suffix"] };
  return { input: { ...input, infill: { before: body.prompt, after: suffix, start: "", files: [] } }, ignored: body.system === undefined ? [] : ["system"] };
}

/** Pull, push, create, copy and delete would change the operator's model files. */
const MANAGED = "Parley's models are its operator's: they are managed on the server (`parley model`, the models directory), not through this API";
const MANAGED_DETAIL = { summary: `Refused: ${MANAGED}`, tags: TAGS, responses: ollamaErrorResponses("forbidden", "unauthorized") };

/** What a generating request can be refused for. */
const REFUSALS = [...TURN_REFUSALS, "quota_exceeded"] as const;
/** What a listing can be refused for. */
const LISTING_REFUSALS = ["unauthorized", "rate_limited", "overloaded"] as const;

export const ollamaRoutes = (deps: CompletionRouteDeps & { retrieval: RetrievalService; log: Logger; metrics: Metrics }) => {
  const leniency = new Leniency(deps);
  const served = (name: string) =>
    servedId(
      name,
      deps.completions.models().map((model) => model.id),
    );
  const ollamaBody = jsonBody(deps.body, { anyMediaType: true });
  const ollamaTurnBody = jsonBody(deps.body, { anyMediaType: true, pictures: true });
  /** A generating route's reply: one object with `stream: false`, else one JSON object a line. */
  async function* answer(
    route: OllamaRoute,
    input: Omit<CompletionInput, "signal" | "userId">,
    body: { model: string; stream?: boolean | null; think?: boolean },
    { principal, ...exchange }: Omit<Exchange, "keyId"> & { principal: Principal },
  ) {
    const shown = body.think !== false;
    const asked = input.contextTokens;
    const clock = new ReplyClock(contextOf(exchange.request).startedAt);
    const seen = (event: CompletionStart | TurnEvent) => {
      clock.seen(event);
      // A context larger than the served one is held to it, and said.
      if (event.type === "start" && asked !== undefined && event.contextTokens !== undefined && event.contextTokens < asked)
        leniency.clamped(exchange, "options.num_ctx", asked, event.contextTokens);
    };
    const turn = (hooks: RequestHooks) => watched(deps.completions.complete({ ...input, userId: principal.userId, ...hooks }), seen);
    const keyed = { ...exchange, keyId: principal.keyId };
    if (body.stream === false) {
      const result = await deps.turns.complete(keyed, turn);
      return result && replyJson(route, body.model, result, shown, clock);
    }
    yield* deps.turns.stream(keyed, turn, ollamaFraming(route, body.model, shown, clock));
  }
  const refused = () => {
    throw new Forbidden(MANAGED);
  };
  /** No prompt: the model loaded (or, with keep_alive 0, unloaded once idle), as Ollama's clients ask. */
  const loaded = async (route: OllamaRoute, body: { model: string; keep_alive?: string | number }, signal: AbortSignal) => {
    const keepAliveMs = keepAliveMsOf(body.keep_alive);
    const model = await deps.completions.load({ model: served(body.model), signal, ...(keepAliveMs !== undefined ? { keepAliveMs } : {}) });
    return loadedJson(route, body.model, model, keepAliveMs === 0);
  };
  return new Elysia({ name: "parley/routes/ollama" })
    .onBeforeHandle(namingFields(ollamaFields))
    .use(requireKey)
    .post(
      "/api/chat",
      async function* ({ body, principal, request, server, set }) {
        leniency.ignored({ request, set }, ignoredFields(body, OllamaChatRequest, HONOURED_OPTIONS));
        if (body.messages.length === 0) return await loaded("chat", body, request.signal);
        return yield* answer("chat", turnInput({ ...body, model: served(body.model) }, turnsOf(body.messages), body.tools), body, {
          principal,
          request,
          server,
          set,
        });
      },
      {
        auth: "key",
        body: OllamaChatRequest,
        parse: ollamaTurnBody,
        detail: {
          summary: "Ollama-compatible chat: the reply as one JSON object a line, or one object with stream: false",
          tags: TAGS,
          responses: { "200": ndjsonResponse("The reply", "OllamaChatResponse"), ...ollamaErrorResponses(...REFUSALS) },
        },
      },
    )
    .post(
      "/api/generate",
      async function* ({ body, principal, request, server, set }) {
        contextOf(request).fields = ollamaGenerateFields;
        const unknown = ignoredFields(body, OllamaGenerateRequest, HONOURED_OPTIONS);
        // No prompt (and no text after it to fill in before) only loads the model, as Ollama's clients ask.
        if (body.prompt === "" && body.system === undefined && !body.suffix) {
          leniency.ignored({ request, set }, unknown);
          return await loaded("generate", body, request.signal);
        }
        if (body.prompt === "" && !body.suffix)
          throw new InvalidInput("prompt", "prompt must not be empty beside a system message (no prompt at all loads the model)");
        const { input, ignored } = generated({ ...body, model: served(body.model) });
        leniency.ignored({ request, set }, [...unknown, ...ignored]);
        return yield* answer("generate", input, body, { principal, request, server, set });
      },
      {
        auth: "key",
        body: OllamaGenerateRequest,
        parse: ollamaTurnBody,
        detail: {
          summary: "Ollama-compatible generate: one prompt through the model's chat template, streamed as for /api/chat",
          tags: TAGS,
          responses: { "200": ndjsonResponse("The reply", "OllamaGenerateResponse"), ...ollamaErrorResponses(...REFUSALS) },
        },
      },
    )
    .get("/api/tags", () => ({ models: deps.completions.models().map(modelJson) }), {
      auth: "key",
      detail: {
        summary: "Ollama-compatible: the models Parley serves, the default first",
        tags: TAGS,
        responses: { "200": jsonResponse("The models", "OllamaModelList"), ...ollamaErrorResponses(...LISTING_REFUSALS) },
      },
    })
    .get(
      "/api/ps",
      () => ({
        models: deps.completions
          .models()
          .filter((model) => model.loaded)
          .map(loadedModelJson),
      }),
      {
        auth: "key",
        detail: {
          summary: "Ollama-compatible: the models loaded now",
          tags: TAGS,
          responses: { "200": jsonResponse("The models loaded", "OllamaModelList"), ...ollamaErrorResponses(...LISTING_REFUSALS) },
        },
      },
    )
    .post(
      "/api/show",
      ({ body, request, set }) => {
        leniency.ignored({ request, set }, ignoredFields(body, OllamaShowRequest, NO_OPTIONS));
        const id = served(body.model);
        const model = deps.completions.models().find((listed) => listed.id === id);
        if (!model) throw new ModelNotFound(`no model ${JSON.stringify(body.model)}: GET /api/tags lists them`);
        return showJson(model);
      },
      {
        auth: "key",
        body: OllamaShowRequest,
        parse: ollamaBody,
        detail: {
          summary: "Ollama-compatible: one model's details",
          tags: TAGS,
          responses: { "200": jsonResponse("The model", "OllamaShowResponse"), ...ollamaErrorResponses("model_not_found", ...REFUSALS) },
        },
      },
    )
    .post(
      "/api/embed",
      async ({ body, principal, request, set }) => {
        leniency.ignored({ request, set }, ignoredFields(body, OllamaEmbedRequest, NO_OPTIONS));
        // As Ollama's server: an empty string is no input, and no input only loads the model.
        const inputs = body.input === "" ? [] : typeof body.input === "string" ? [body.input] : body.input;
        const empty = inputs.indexOf("");
        if (empty >= 0) throw new InvalidInput(`input[${empty}]`, "must not be empty: an empty text has no vector");
        const bad = inputs.findIndex((input) => !input.isWellFormed());
        if (bad >= 0)
          throw new InvalidInput(typeof body.input === "string" ? "input" : `input[${bad}]`, "must be valid Unicode text (it has a lone surrogate)");
        const result = await deps.retrieval.embed({
          userId: principal.userId,
          model: served(body.model),
          inputs,
          truncate: body.truncate !== false,
          ...keepAlive(body.keep_alive),
          ...(body.dimensions != null ? { dimensions: body.dimensions } : {}),
          ...hooksOf({ request, set }),
        });
        return result && embedJson(body.model, result, contextOf(request).startedAt);
      },
      {
        auth: "key",
        body: OllamaEmbedRequest,
        parse: ollamaBody,
        detail: {
          summary: "Ollama-compatible embeddings: one normalized vector an input, from an embedding model",
          tags: TAGS,
          responses: { "200": jsonResponse("The vectors", "OllamaEmbedResponse"), ...ollamaErrorResponses(...RETRIEVAL_REFUSALS) },
        },
      },
    )
    .post(
      "/api/embeddings",
      async ({ body, principal, request, set }) => {
        leniency.ignored({ request, set }, ignoredFields(body, OllamaEmbeddingsRequest, NO_OPTIONS));
        if (!body.prompt.isWellFormed()) throw new InvalidInput("prompt", "must be valid Unicode text (it has a lone surrogate)");
        const result = await deps.retrieval.embed({
          userId: principal.userId,
          model: served(body.model),
          // No prompt only loads the model, as on Ollama's server.
          inputs: body.prompt === "" ? [] : [body.prompt],
          truncate: true,
          normalize: false,
          ...keepAlive(body.keep_alive),
          ...hooksOf({ request, set }),
        });
        return result && { embedding: Array.from(result.vectors[0] ?? []) };
      },
      {
        auth: "key",
        body: OllamaEmbeddingsRequest,
        parse: ollamaBody,
        detail: {
          summary: "Ollama's older embeddings route: one prompt's vector as the model pools it, not normalized",
          tags: TAGS,
          responses: { "200": jsonResponse("The vector", "OllamaEmbeddingsResponse"), ...ollamaErrorResponses(...RETRIEVAL_REFUSALS) },
        },
      },
    )
    .get("/api/version", () => ({ version: pkg.version }), {
      auth: "key",
      detail: {
        summary: "Ollama-compatible: Parley's version",
        tags: TAGS,
        responses: { "200": jsonResponse("The version", "OllamaVersion"), ...ollamaErrorResponses(...LISTING_REFUSALS) },
      },
    })
    .post("/api/pull", refused, { auth: "key", parse: ollamaBody, detail: MANAGED_DETAIL })
    .post("/api/push", refused, { auth: "key", parse: ollamaBody, detail: MANAGED_DETAIL })
    .post("/api/create", refused, { auth: "key", parse: ollamaBody, detail: MANAGED_DETAIL })
    .post("/api/copy", refused, { auth: "key", parse: ollamaBody, detail: MANAGED_DETAIL })
    .delete("/api/delete", refused, { auth: "key", parse: ollamaBody, detail: MANAGED_DETAIL });
};
