/**
 * llama-server's `POST /infill`, as llama.vscode and llama.vim call it: the text between what is
 * before the cursor and what is after it, completed by a model trained to fill in the middle
 * (`llm/infill.ts` assembles its prompt token for token as llama-server does), over the same
 * turns, keys, quotas, prompt cache (per user), logs and metrics as every completion. JSON, or with
 * `stream: true` llama-server's unnamed events. Errors in OpenAI's shape, as llama-server's.
 */
import { Elysia } from "elysia";
import type { CompletionInput } from "../../chat/completions";
import { InvalidInput } from "../../errors";
import { requireKey } from "../auth";
import { namingFields } from "../field-names";
import { InfillRequest } from "../infill/contract";
import { infillFields } from "../infill/fields";
import { InfillClock, infillFraming, infillJson } from "../infill/present";
import { chainOf } from "../infill/samplers";
import { jsonBody } from "../json-body";
import { infillResponse, openAiErrorResponses, TURN_REFUSALS } from "../openapi";
import { samplingFieldsOf } from "../sampling-fields";
import { type CompletionRouteDeps, type RequestHooks, watched } from "../turn-driver";

/** llama-server's defaults where its request sets none (common/common.h, `common_params_sampling`). */
const DEFAULT_TEMPERATURE = 0.8;
const DEFAULT_MIN_P = 0.05;
/** A file of `input_extra` without a name is called so, as llama-server calls it. */
const UNNAMED_FILE = "tmp";

function infillInput(body: InfillRequest): Omit<CompletionInput, "signal" | "userId"> {
  const texts = [body.input_prefix, body.input_suffix, body.prompt ?? "", ...(body.stop ?? [])];
  if (!texts.every((text) => text.isWellFormed()))
    throw new InvalidInput("input_prefix", "input_prefix, input_suffix, prompt and stop must be valid Unicode text");
  const files = (body.input_extra ?? []).map((file, i) => {
    const name = file.filename ?? UNNAMED_FILE;
    if (!file.text.isWellFormed() || !name.isWellFormed()) throw new InvalidInput(`input_extra[${i}]`, "a file's text and filename must be valid Unicode text");
    return { name, text: file.text };
  });
  const stopWhen = {
    ...(body.n_indent ? { lineIndentBelow: body.n_indent } : {}),
    ...(body.t_max_predict_ms != null && body.t_max_predict_ms > 0 ? { afterMsAtNewLine: body.t_max_predict_ms } : {}),
  };
  // n_predict wins over max_tokens, as in llama-server; 0 would only evaluate the prompt, which Parley's cache does not need.
  const predict = body.n_predict ?? body.max_tokens ?? -1;
  const sampling = {
    temperature: body.temperature ?? DEFAULT_TEMPERATURE,
    ...samplingFieldsOf(body),
    minP: body.min_p ?? DEFAULT_MIN_P,
    ...(body.repeat_last_n != null ? { penaltyWindow: body.repeat_last_n < 0 ? Number.POSITIVE_INFINITY : body.repeat_last_n } : {}),
    seed: body.seed == null || body.seed < 0 ? undefined : body.seed >>> 0,
  };
  if (predict === 0)
    throw new InvalidInput("n_predict", "must be at least 1, or -1 for as long as the context allows (Parley caches a prompt as it answers it)");
  return {
    messages: [],
    infill: { before: body.input_prefix, after: body.input_suffix, start: body.prompt ?? "", files },
    ...(body.model != null ? { model: body.model } : {}),
    sampling: body.samplers == null ? sampling : chainOf(body.samplers, sampling),
    ...(predict > 0 ? { maxTokens: predict } : {}),
    ...(body.stop?.length ? { stop: body.stop } : {}),
    ...(Object.keys(stopWhen).length > 0 ? { stopWhen } : {}),
  };
}

export const infillRoutes = (deps: CompletionRouteDeps) =>
  new Elysia({ name: "parley/routes/infill" })
    .onBeforeHandle(namingFields(infillFields))
    .use(requireKey)
    .post(
      "/infill",
      async function* ({ body, principal, request, server, set }) {
        const input = infillInput(body);
        const clock = new InfillClock();
        const fields = body.response_fields ?? undefined;
        const turn = (hooks: RequestHooks) => deps.completions.complete({ ...input, userId: principal.userId, ...hooks });
        if (body.stream !== true) {
          const result = await deps.turns.complete({ request, set }, (hooks) => watched(turn(hooks), (event) => clock.seen(event)));
          return result && infillJson(result, clock, fields);
        }
        yield* deps.turns.stream({ request, set, server, keyId: principal.keyId }, turn, infillFraming(clock, fields));
      },
      {
        auth: "key",
        body: InfillRequest,
        parse: jsonBody(deps.body),
        detail: {
          summary:
            "llama-server-compatible code completion: the middle between input_prefix and input_suffix, by a model with fill-in-the-middle tokens (JSON, or llama-server's events with stream: true)",
          tags: ["llama-server-compatible"],
          responses: {
            "200": infillResponse,
            ...openAiErrorResponses(...TURN_REFUSALS, "quota_exceeded"),
          },
        },
      },
    );
