/**
 * A turn as OpenAI's Responses API shows it: a `response` object whose output items are the
 * thought (`reasoning`), the answer (`message`) and the calls (`function_call`), in that order;
 * streamed as OpenAI's typed events, each with its `sequence_number`.
 */
import { append } from "../../append";
import type { ItemPage } from "../../chat/items";
import { replyItemId, stepStem } from "../../chat/items";
import type { ResponseResult, ResponseStart } from "../../chat/responses";
import { responseStem } from "../../chat/responses";
import type { TurnServerTool } from "../../chat/turn-runner";
import type { ConversationItem, ResponseRecord, StoredConversation, StoredImage } from "../../db/types";
import type { ToolCall, ToolCallPart } from "../../llm/engine";
import { openAiErrorBody } from "../errors";
import { pictureUrl } from "../pictures";
import { event } from "../sse";
import type { Framing } from "../turn-driver";
import type { ConversationObject, InputItem, InputItemList, OutputItem, ResponseObject } from "./responses-contract";

/** What a response repeats of its request: kept with it, as its `params`. */
export type ResponseEcho = Pick<
  ResponseObject,
  | "instructions"
  | "max_output_tokens"
  | "temperature"
  | "top_p"
  | "text"
  | "tool_choice"
  | "tools"
  | "parallel_tool_calls"
  | "metadata"
  | "store"
  | "conversation"
>;

type ItemStatus = "in_progress" | "completed" | "incomplete";

/** The response object of a kept (or only answered) response, as it stands. */
export function responseObject(record: ResponseRecord): ResponseObject {
  const itemStatus: ItemStatus = record.status === "completed" ? "completed" : "incomplete";
  return {
    id: record.id,
    object: "response",
    created_at: Math.floor(record.createdAt / 1000),
    status: record.status === "queued" ? "in_progress" : record.status,
    error: record.error === null ? null : { code: "server_error", message: record.error },
    // A reply cut by the generation cap or a shutdown also ends before its natural end, as Chat Completions' `length` says.
    incomplete_details: record.status === "incomplete" ? { reason: "max_output_tokens" } : null,
    model: record.model,
    output: record.output.map((item) => outputItemJson(item, itemStatus)),
    previous_response_id: record.previousResponseId,
    background: record.background,
    truncation: "auto",
    // Written by responseParams from this very type.
    ...(record.params as ResponseEcho),
    usage: record.usage && {
      input_tokens: record.usage.inputTokens,
      input_tokens_details: { cached_tokens: record.usage.cachedTokens, cache_write_tokens: 0 },
      output_tokens: record.usage.outputTokens,
      output_tokens_details: { reasoning_tokens: record.usage.reasoningTokens ?? 0 },
      total_tokens: record.usage.inputTokens + record.usage.outputTokens,
    },
  };
}

type ReasoningOutput = Extract<OutputItem, { type: "reasoning" }>;
type MessageOutput = Extract<OutputItem, { type: "message" }>;

const reasoningJson = (id: string, text: string, status: ItemStatus): ReasoningOutput => ({
  type: "reasoning",
  id,
  summary: [],
  content: [{ type: "reasoning_text", text }],
  status,
});

const messageJson = (id: string, text: string, status: ItemStatus): MessageOutput => ({
  type: "message",
  id,
  status,
  role: "assistant",
  content: [{ type: "output_text", text, annotations: [], logprobs: [] }],
});

const callJson = (id: string, call: ToolCall): OutputItem => ({
  type: "function_call",
  id,
  call_id: call.id,
  name: call.name,
  arguments: call.arguments,
  status: "completed",
});

type ServerItem = Extract<ConversationItem, { type: "toolList" | "serverCall" | "approvalRequest" }>;
type McpCallOutput = Extract<OutputItem, { type: "mcp_call" }>;

/** A server's item as OpenAI names it: a listing, a call made, a call asked of the client. */
function serverItemJson(item: ServerItem): Extract<OutputItem, { type: "mcp_list_tools" | "mcp_call" | "mcp_approval_request" }> {
  switch (item.type) {
    case "toolList":
      return {
        type: "mcp_list_tools",
        id: item.id,
        server_label: item.server,
        tools: item.tools.map((tool) => ({
          name: tool.name,
          description: tool.description ?? null,
          input_schema: tool.inputSchema,
          annotations: tool.annotations ?? null,
        })),
        error: item.error ?? null,
      };
    case "serverCall":
      return {
        type: "mcp_call",
        id: item.id,
        server_label: item.server,
        name: item.name,
        arguments: item.arguments,
        output: item.output,
        error:
          item.error === null
            ? null
            : item.error.kind === "tool"
              ? { type: "mcp_tool_execution_error", content: item.error.content }
              : { type: "mcp_protocol_error", code: item.error.code, message: item.error.message },
        approval_request_id: item.approvalRequestId ?? null,
        status: item.error === null ? "completed" : "failed",
      };
    case "approvalRequest":
      return { type: "mcp_approval_request", id: item.id, server_label: item.server, name: item.name, arguments: item.arguments };
  }
}

/** An item the model wrote, or a server's; a message's status is its response's. */
function outputItemJson(item: ConversationItem, status: ItemStatus): OutputItem {
  switch (item.type) {
    case "toolList":
    case "serverCall":
    case "approvalRequest":
      return serverItemJson(item);
    case "approvalResponse":
      throw new Error("a response cannot have output approvalResponse");
    case "thought":
      return reasoningJson(item.id, item.text, "completed");
    case "toolCall":
      return callJson(item.id, { id: item.callId, name: item.name, arguments: item.arguments });
    case "message":
    case "toolResult":
      if (item.type === "toolResult" || item.role !== "assistant") throw new Error(`a response cannot have output ${item.type}`);
      return messageJson(item.id, item.text, status);
  }
}

export function inputItemJson(item: ConversationItem): InputItem {
  if (item.type === "approvalResponse")
    return { type: "mcp_approval_response", id: item.id, approval_request_id: item.approvalRequestId, approve: item.approve, reason: item.reason ?? null };
  if (item.type === "toolResult") return { type: "function_call_output", id: item.id, call_id: item.callId, output: item.output, status: "completed" };
  if (item.type === "message" && item.role !== "assistant")
    return { type: "message", id: item.id, status: "completed", role: item.role, content: inputContent(item) };
  return outputItemJson(item, "completed");
}

type InputContent = Extract<InputItem, { role: "user" | "system" | "developer" }>["content"][number];

/** A message's text as one part, or cut where its pictures stand, each a part of its own. */
function inputContent({ text, images = [] }: { text: string; images?: readonly StoredImage[] }): InputContent[] {
  const parts: InputContent[] = [];
  let from = 0;
  for (const { at, base64 } of images) {
    if (at > from) parts.push({ type: "input_text", text: text.slice(from, at) });
    parts.push({ type: "input_image", image_url: pictureUrl(base64), file_id: null, detail: "auto" });
    from = at;
  }
  if (from < text.length || parts.length === 0) parts.push({ type: "input_text", text: text.slice(from) });
  return parts;
}

/** A conversation as the Conversations API shows it. */
export const conversationJson = (conversation: StoredConversation): ConversationObject => ({
  id: conversation.externalId,
  object: "conversation",
  created_at: Math.floor(conversation.createdAt / 1000),
  metadata: conversation.metadata,
});

/** Items as the Responses and Conversations APIs list them. */
export const inputItemList = ({ items, hasMore }: ItemPage): InputItemList => ({
  object: "list",
  data: items.map(inputItemJson),
  first_id: items[0]?.id ?? null,
  last_id: items.at(-1)?.id ?? null,
  has_more: hasMore,
});

/** The event that ends a stream of a response that ended so. */
const ENDING = { completed: "response.completed", failed: "response.failed", incomplete: "response.incomplete", cancelled: "response.incomplete" } as const;

/**
 * The event that ends the stream of a response that ended while nobody streamed it (its server
 * died, say), numbered after its kept events: a client resuming it learns how it ended.
 */
export const endingEvent = (record: ResponseRecord, sequence: number) => {
  const type = ENDING[record.status as keyof typeof ENDING] ?? "response.failed";
  return event(type, { type, sequence_number: sequence, response: responseObject(record) });
};

/**
 * The stream: `response.created` and `response.in_progress`, then each item as it comes (added,
 * its deltas, done), then `response.completed` (or `.incomplete`, `.failed`) with the whole
 * response as it is kept. An item's text comes as deltas of its part, a call's arguments as
 * deltas of the call; items are named as the kept response names them.
 */
export function responsesFraming(): Framing<ResponseStart, ResponseResult> {
  let sequence = 0;
  let responseId = "";
  /** The stem of the items the model turn now running writes (a response that runs tools has several). */
  let stem = "";
  /** The server call being written that waits for approval: asked once written whole. */
  let asking: { index: number; server: string } | undefined;
  const output: OutputItem[] = [];
  /** The item being written, with its text so far. */
  let open: { item: ReasoningOutput | MessageOutput; text: string } | undefined;
  const send = (type: string, payload: object) => event(type, { type, sequence_number: sequence++, ...payload });
  const where = () => ({ output_index: output.length - 1, item_id: output.at(-1)!.id });

  const close = (status: ItemStatus = "completed") => {
    if (!open) return [];
    const { item, text } = open;
    open = undefined;
    const done = item.type === "reasoning" ? reasoningJson(item.id, text, "completed") : messageJson(item.id, text, status);
    output[output.length - 1] = done;
    const part = done.content[0]!;
    return [
      send(item.type === "reasoning" ? "response.reasoning_text.done" : "response.output_text.done", {
        ...where(),
        content_index: 0,
        text,
        ...(item.type === "message" ? { logprobs: [] } : {}),
      }),
      send("response.content_part.done", { ...where(), content_index: 0, part }),
      send("response.output_item.done", { output_index: output.length - 1, item: done }),
    ];
  };

  const begin = (type: "reasoning" | "message") => {
    const id = replyItemId(stem, type === "reasoning" ? "thought" : type);
    const item = type === "reasoning" ? reasoningJson(id, "", "in_progress") : messageJson(id, "", "in_progress");
    output.push(item);
    open = { item, text: "" };
    return [
      send("response.output_item.added", { output_index: output.length - 1, item: { ...item, content: [] } }),
      send("response.content_part.added", { ...where(), content_index: 0, part: item.content[0]! }),
    ];
  };

  const write = (type: "reasoning" | "message", delta: string) => {
    const opened = open?.item.type === type ? [] : [...close(), ...begin(type)];
    open!.text += delta;
    const name = type === "reasoning" ? "response.reasoning_text.delta" : "response.output_text.delta";
    return [...opened, send(name, { ...where(), content_index: 0, delta, ...(type === "message" ? { logprobs: [] } : {}) })];
  };

  const at = (id: string) => ({ output_index: output.findIndex((item) => item.id === id), item_id: id });

  /** A server's item, done: a listing or a call made shows its progress first (a call the model wrote is already added). */
  const serverItem = (item: ServerItem) => {
    const json = serverItemJson(item);
    const events = close();
    if (json.type === "mcp_approval_request") {
      output.push(json);
      return [
        ...events,
        send("response.output_item.added", { output_index: output.length - 1, item: json }),
        send("response.output_item.done", { output_index: output.length - 1, item: json }),
      ];
    }
    const kind = json.type === "mcp_call" ? "response.mcp_call" : "response.mcp_list_tools";
    if (!output.some((written) => written.id === json.id)) {
      const added = json.type === "mcp_call" ? { ...json, output: null, error: null, status: "in_progress" } : { ...json, tools: [], error: null };
      output.push(added as OutputItem);
      events.push(send("response.output_item.added", { output_index: output.length - 1, item: added }), send(`${kind}.in_progress`, at(json.id)));
    }
    const where = at(json.id);
    output[where.output_index] = json;
    events.push(
      send(`${kind}.${json.error !== null ? "failed" : "completed"}`, where),
      send("response.output_item.done", { output_index: where.output_index, item: json }),
    );
    return events;
  };

  /** A part of a call the model writes of a server's tool: an `mcp_call` as it is written, or, waiting for approval, nothing until asked. */
  const serverCall = (part: ToolCallPart, server: string, approval: boolean) => {
    if (approval) {
      if (part.part === "open") asking = { index: part.index, server };
      return [];
    }
    switch (part.part) {
      case "open": {
        const item: McpCallOutput = {
          type: "mcp_call",
          id: replyItemId(stem, "serverCall", part.index),
          server_label: server,
          name: part.name,
          arguments: "",
          output: null,
          error: null,
          approval_request_id: null,
          status: "in_progress",
        };
        const events = close();
        output.push(item);
        events.push(send("response.output_item.added", { output_index: output.length - 1, item }));
        return events;
      }
      case "arguments":
        return [send("response.mcp_call_arguments.delta", { ...where(), delta: part.text })];
      case "close":
        return [send("response.mcp_call_arguments.done", { ...where(), arguments: part.call.arguments }), send("response.mcp_call.in_progress", where())];
    }
  };

  const serverTool = (event: TurnServerTool) => {
    switch (event.event) {
      case "step":
        stem = stepStem(responseStem(responseId), event.step);
        return close();
      case "call": {
        const asked = asking && event.part.part === "close" && asking.index === event.part.index ? asking : undefined;
        if (!asked) return serverCall(event.part, event.server, event.approval);
        asking = undefined;
        const { call } = event.part as Extract<ToolCallPart, { part: "close" }>;
        const id = replyItemId(stem, "approvalRequest", event.part.index);
        return serverItem({ type: "approvalRequest", id, server: asked.server, name: call.name, arguments: call.arguments });
      }
      case "item":
        if (event.item.type === "toolList" || event.item.type === "serverCall" || event.item.type === "approvalRequest") return serverItem(event.item);
        return [];
    }
  };

  return {
    serverTool,
    start: ({ response: started }) => {
      responseId = started.id;
      stem = responseStem(started.id);
      const response = responseObject(started);
      return [send("response.created", { response }), send("response.in_progress", { response })];
    },
    reasoning: (text) => write("reasoning", text),
    delta: (text) => write("message", text),
    toolCall: (part) => {
      switch (part.part) {
        case "open": {
          const item = callJson(replyItemId(stem, "toolCall", part.index), { id: part.id, name: part.name, arguments: "" });
          const events = close();
          output.push(item);
          events.push(send("response.output_item.added", { output_index: output.length - 1, item: { ...item, status: "in_progress" } }));
          return events;
        }
        case "arguments":
          return [send("response.function_call_arguments.delta", { ...where(), delta: part.text })];
        case "close": {
          const item = callJson(output.at(-1)!.id, part.call);
          output[output.length - 1] = item;
          return [
            send("response.function_call_arguments.done", { ...where(), name: part.call.name, arguments: part.call.arguments }),
            send("response.output_item.done", { output_index: output.length - 1, item }),
          ];
        }
      }
    },
    done: ({ response: ended }) => {
      const status: ItemStatus = ended.status === "completed" ? "completed" : "incomplete";
      const events = close(status);
      // A response that says nothing and calls nothing still has its (empty) message.
      if (ended.output.some((item) => item.type === "message") && !output.some((item) => item.type === "message"))
        append(append(events, begin("message")), close(status));
      return [...events, send(ENDING[ended.status as keyof typeof ENDING] ?? "response.incomplete", { response: responseObject(ended) })];
    },
    error: (error) => {
      const { error: body } = openAiErrorBody(error);
      return [send("error", { code: body.code, message: body.message, param: body.param })];
    },
  };
}
