/**
 * Anthropic's Messages API over the same runner, keys, limits, quotas, logs and metrics: a third
 * framing of the same turn, stateless like OpenAI's (the client sends the history). Its clients'
 * `x-api-key` is taken as the key (auth.ts), `anthropic-version` is accepted, and its errors take
 * Anthropic's shape (errors.ts). Every field is honoured or refused.
 */
import { Elysia } from "elysia";
import { append } from "../../append";
import type { CompletionInput } from "../../chat/completions";
import { newStem } from "../../chat/items";
import type { Caller, ServerToolUse } from "../../chat/server-tools";
import { InvalidInput } from "../../errors";
import type { Turn, TurnImage } from "../../llm/engine";
import { CountTokensRequest, MessagesRequest } from "../anthropic/contract";
import { anthropicFields } from "../anthropic/fields";
import { messageJson, messagesFraming, newMessageId } from "../anthropic/present";
import { requireKey } from "../auth";
import { namingFields } from "../field-names";
import { jsonBody } from "../json-body";
import { toolRequestOf } from "../offered-tools";
import { anthropicErrorResponses, jsonResponse, TURN_REFUSALS } from "../openapi";
import { RequestPictures } from "../pictures";
import { samplingFieldsOf } from "../sampling-fields";
import type { CompletionRouteDeps, RequestHooks } from "../turn-driver";

const TAGS = ["Anthropic-compatible"];

type TextBlocks = NonNullable<MessagesRequest["system"]>;
type Message = MessagesRequest["messages"][number];
type Block = Exclude<Message["content"], string>[number];

const textOf = (content: string | TextBlocks) => (typeof content === "string" ? content : content.map((block) => block.text).join(""));

/**
 * One message as turns. An assistant's text and `tool_use` blocks are one turn with its calls; a
 * user's `tool_result` blocks are each a tool's turn (answering a call an earlier assistant turn
 * made; an error's text marked so), then its text, if any, is a user turn.
 */
async function messageTurns({ role, content }: Message, at: string, calls: Map<string, string>, pictures: RequestPictures): Promise<Turn[]> {
  if (typeof content === "string") return [{ role, content }];
  if (role === "assistant" && content.some((block) => block.type === "mcp_tool_result")) return await serverToolTurns(content, at, calls, pictures);
  const blocksOf = <T extends Block["type"]>(type: T) => content.filter((block): block is Extract<Block, { type: T }> => block.type === type);
  const redacted = content.findIndex((block) => block.type === "redacted_thinking");
  if (redacted >= 0)
    throw new InvalidInput(
      `${at}.content[${redacted}]`,
      "redacted_thinking blocks are another service's encrypted thoughts, which Parley cannot read (it writes none)",
    );
  let text = "";
  const images: TurnImage[] = [];
  for (const [j, block] of content.entries()) {
    if (block.type === "text") text += block.text;
    else if (block.type === "image") images.push({ data: await pictureOf(block.source, `${at}.content[${j}].source`, pictures), at: text.length });
  }
  if (role === "assistant") {
    const image = content.findIndex((block) => block.type === "image");
    if (image >= 0) throw new InvalidInput(`${at}.content[${image}]`, "a picture belongs to a user message");
    const result = content.findIndex((block) => block.type === "tool_result");
    if (result >= 0) throw new InvalidInput(`${at}.content[${result}]`, "a tool_result belongs to a user message");
    const toolCalls = content.flatMap((block) =>
      block.type === "tool_use" || block.type === "mcp_tool_use" ? [{ id: block.id, name: block.name, arguments: JSON.stringify(block.input) }] : [],
    );
    for (const call of toolCalls) calls.set(call.id, call.name);
    const thought = blocksOf("thinking")
      .map((block) => block.thinking)
      .join("");
    return [{ role, content: text, ...(thought !== "" ? { reasoning: thought } : {}), ...(toolCalls.length > 0 ? { toolCalls } : {}) }];
  }
  const results = content.flatMap((block, j): Turn[] => {
    if (block.type === "tool_use" || block.type === "thinking" || block.type === "mcp_tool_use" || block.type === "mcp_tool_result")
      throw new InvalidInput(`${at}.content[${j}]`, `a ${block.type} block belongs to an assistant message`);
    if (block.type !== "tool_result") return [];
    const name = calls.get(block.tool_use_id);
    if (name === undefined)
      throw new InvalidInput(
        `${at}.content[${j}].tool_use_id`,
        `a tool_result must answer a tool_use of an earlier assistant message (${JSON.stringify(block.tool_use_id)} answers none)`,
      );
    const output = textOf(block.content ?? "");
    return [{ role: "tool", content: block.is_error === true ? `Error: ${output}` : output, toolCallId: block.tool_use_id, name }];
  });
  return text !== "" || images.length > 0 || results.length === 0 ? [...results, { role, content: text, ...(images.length > 0 ? { images } : {}) }] : results;
}

/**
 * An assistant message with the calls the service made of MCP servers' tools: its blocks up to each
 * `mcp_tool_result` are a turn (the calls among them), each result the tool's turn after it.
 */
async function serverToolTurns(content: Block[], at: string, calls: Map<string, string>, pictures: RequestPictures): Promise<Turn[]> {
  const turns: Turn[] = [];
  let from = 0;
  for (const [j, block] of content.entries()) {
    if (block.type !== "mcp_tool_result") continue;
    if (j > from) append(turns, await messageTurns({ role: "assistant", content: content.slice(from, j) }, at, calls, pictures));
    from = j + 1;
    const name = calls.get(block.tool_use_id);
    if (name === undefined)
      throw new InvalidInput(
        `${at}.content[${j}].tool_use_id`,
        `an mcp_tool_result must answer an mcp_tool_use before it (${JSON.stringify(block.tool_use_id)} answers none)`,
      );
    const output = textOf(block.content ?? "");
    turns.push({ role: "tool", content: block.is_error === true ? `Error: ${output}` : output, toolCallId: block.tool_use_id, name });
  }
  if (from < content.length) append(turns, await messageTurns({ role: "assistant", content: content.slice(from) }, at, calls, pictures));
  return turns;
}

/** A picture block's bytes: its base64, or its URL's (a listed host's); never a file's. */
async function pictureOf(source: Extract<Block, { type: "image" }>["source"], at: string, pictures: RequestPictures): Promise<Uint8Array> {
  switch (source.type) {
    case "base64":
      return pictures.fromBase64(`${at}.data`, source.data);
    case "url":
      return await pictures.fromUrl(`${at}.url`, source.url);
    case "file":
      throw new InvalidInput(`${at}.file_id`, "Parley keeps no files: send the picture as base64");
  }
}

/**
 * The history as turns: the system prompt first, then the messages, whose text must be valid
 * Unicode. A final assistant message would be a prefill, whose reply continues it: Parley's
 * prompts always open a new reply, so it is refused rather than answered as a new turn.
 */
async function turnsOf(request: Pick<MessagesRequest, "system" | "messages">, pictures: RequestPictures): Promise<Turn[]> {
  const last = request.messages.length - 1;
  if (request.messages[last]!.role === "assistant") {
    throw new InvalidInput(
      `messages[${last}]`,
      `messages[${last}] is an assistant's: a final assistant message (a prefill for the reply to continue) is not supported; end with a user message`,
    );
  }
  const calls = new Map<string, string>();
  const turns: Turn[] = request.system != null ? [{ role: "system" as const, content: textOf(request.system) }] : [];
  for (const [i, message] of request.messages.entries()) append(turns, await messageTurns(message, `messages[${i}]`, calls, pictures));
  // A lone surrogate is no text the model can be given (the other APIs refuse it the same way).
  if (!turns.every((turn) => turn.content.isWellFormed() && (turn.reasoning ?? "").isWellFormed())) {
    throw new InvalidInput("messages", "messages, their thinking and system must be valid Unicode text (one has a lone surrogate)");
  }
  return turns;
}

/**
 * The MCP servers a request names, as the service runs them: Anthropic's connector asks no
 * approval; a tool choice that names none of the client's tools (or `any` with none) is theirs.
 */
function serverToolsOf(body: Pick<MessagesRequest, "tools" | "tool_choice" | "mcp_servers">, caller: Caller): CompletionInput["serverTools"] {
  const servers = body.mcp_servers ?? [];
  if (servers.length === 0) return undefined;
  const choice = body.tool_choice ?? undefined;
  const own = body.tools ?? [];
  const serverChoice =
    choice?.type === "tool" && !own.some((tool) => tool.name === choice.name)
      ? { name: choice.name }
      : choice?.type === "any" && own.length === 0
        ? {}
        : undefined;
  return {
    stem: newStem(),
    caller,
    ...(choice?.type === "none" ? { none: true } : {}),
    uses: servers.map(
      (server, index): ServerToolUse => ({
        index,
        label: server.name,
        url: server.url,
        headers: server.authorization_token != null ? { Authorization: `Bearer ${server.authorization_token}` } : {},
        ...(server.tool_configuration?.enabled === false
          ? { allowedTools: [] }
          : server.tool_configuration?.allowed_tools != null
            ? { allowedTools: server.tool_configuration.allowed_tools }
            : {}),
        approval: { always: false, except: [] },
      }),
    ),
    ...(serverChoice ? { choice: serverChoice } : {}),
  };
}

/** The tools offered and the choice, as the engine takes them; none when none are offered or the choice is `none`. */
function toolsOf(body: Pick<MessagesRequest, "tools" | "tool_choice">, serverChoice = false) {
  const choice = serverChoice ? undefined : (body.tool_choice ?? undefined);
  return toolRequestOf({
    functions: (body.tools ?? []).map((tool) => ({
      name: tool.name,
      description: tool.description,
      parameters: tool.input_schema,
      strict: tool.strict === true,
    })),
    choice: choice === undefined ? undefined : choice.type === "any" ? "required" : choice.type === "tool" ? { name: choice.name } : choice.type,
    parallel: !(choice !== undefined && choice.type !== "none" && choice.disable_parallel_tool_use === true),
  });
}

/**
 * The request's `thinking` as the engine honours it: the thought's budget in tokens (0: none; absent:
 * as long as the model thinks, as `adaptive`) and whether the reply shows its text (`display`).
 * Without `thinking`, a reasoning model thinks as it would, and its thought is shown.
 */
function thinkingOf({ thinking, max_tokens }: Pick<MessagesRequest, "thinking" | "max_tokens">): { tokens?: number; shown: boolean } {
  if (thinking == null) return { shown: true };
  if (thinking.type === "disabled") return { tokens: 0, shown: true };
  const shown = thinking.display !== "omitted";
  if (thinking.type === "adaptive") return { shown };
  if (thinking.budget_tokens >= max_tokens)
    throw new InvalidInput(
      "thinking.budget_tokens",
      `thinking.budget_tokens must be less than max_tokens (${max_tokens}): the thought's tokens are part of the reply's`,
    );
  return { tokens: thinking.budget_tokens, shown };
}

async function completionInput(
  body: MessagesRequest,
  thoughtTokens: number | undefined,
  pictures: RequestPictures,
  caller: Caller,
): Promise<Omit<CompletionInput, "signal" | "userId">> {
  const stop = body.stop_sequences ?? undefined;
  if (stop && !stop.every((text) => text.isWellFormed())) throw new InvalidInput("stop_sequences", "stop_sequences must be valid Unicode text");
  const serverTools = serverToolsOf(body, caller);
  const tools = toolsOf(body, serverTools?.choice !== undefined);
  return {
    messages: await turnsOf(body, pictures),
    model: body.model,
    sampling: {
      // Anthropic's default.
      temperature: body.temperature ?? 1,
      ...samplingFieldsOf(body),
    },
    maxTokens: body.max_tokens,
    ...(thoughtTokens !== undefined ? { thoughtTokens } : {}),
    ...(stop && stop.length > 0 ? { stop } : {}),
    ...(tools ? { tools } : {}),
    ...(serverTools ? { serverTools } : {}),
  };
}

export const anthropicRoutes = (deps: CompletionRouteDeps) =>
  new Elysia({ name: "parley/routes/anthropic" })
    .onBeforeHandle(namingFields(anthropicFields))
    .use(requireKey)
    .post(
      "/v1/messages",
      async function* ({ body, principal, request, server, set }) {
        const thinking = thinkingOf(body);
        const pictures = new RequestPictures(deps.body.pictureHosts);
        const input = await completionInput(body, thinking.tokens, pictures, principal);
        pictures.nameIn(request);
        const turn = (hooks: RequestHooks) => deps.completions.complete({ ...input, userId: principal.userId, ...hooks });
        const id = newMessageId();
        const exchange = { request, set, server, keyId: principal.keyId };
        if (body.stream !== true) {
          const result = await deps.turns.complete(exchange, turn);
          return result && messageJson(id, result, thinking.shown);
        }
        yield* deps.turns.stream(exchange, turn, messagesFraming(id, thinking.shown, input.serverTools?.stem));
      },
      {
        auth: "key",
        body: MessagesRequest,
        parse: jsonBody(deps.body, { pictures: true }),
        detail: {
          summary: "Anthropic-compatible Messages: the reply as a message (JSON, or Anthropic's named events with stream: true)",
          tags: TAGS,
          responses: {
            "200": jsonResponse("The message", "AnthropicMessage"),
            ...anthropicErrorResponses(...TURN_REFUSALS, "quota_exceeded", "dependency_failed"),
          },
        },
      },
    )
    .post(
      "/v1/messages/count_tokens",
      async ({ body, principal, request }) => {
        const tools = toolsOf(body);
        const count = await deps.completions.countTokens({
          userId: principal.userId,
          model: body.model,
          messages: await turnsOf(body, new RequestPictures(deps.body.pictureHosts)),
          signal: request.signal,
          ...(tools ? { tools } : {}),
        });
        return { input_tokens: count };
      },
      {
        auth: "key",
        body: CountTokensRequest,
        parse: jsonBody(deps.body, { pictures: true }),
        detail: {
          summary: "Anthropic-compatible: the prompt's tokens with the model's chat template, without generating",
          tags: TAGS,
          responses: { "200": jsonResponse("The count", "TokenCount"), ...anthropicErrorResponses(...TURN_REFUSALS) },
        },
      },
    );
