/**
 * A turn as OpenAI's Responses API shows it: a `response` object whose output items are the
 * thought (`reasoning`), the answer (`message`) and the calls (`function_call`), in that order;
 * streamed as OpenAI's typed events, each with its `sequence_number`.
 */
import type { CompletionResult, CompletionStart } from "../../chat/completions";
import type { ToolCall } from "../../llm/engine";
import { openAiErrorBody } from "../errors";
import { event } from "../sse";
import type { Framing } from "../turn-driver";
import type { OutputItem, ResponseObject } from "./responses-contract";

/** What a response repeats of its request. */
export type ResponseEcho = Pick<
  ResponseObject,
  "instructions" | "max_output_tokens" | "temperature" | "top_p" | "text" | "tool_choice" | "tools" | "parallel_tool_calls" | "metadata"
>;

export interface ResponseIdentity {
  id: string;
  /** Unix seconds. */
  created_at: number;
}

const hex = () => crypto.randomUUID().replaceAll("-", "");

export const newResponse = (): ResponseIdentity => ({ id: `resp_${hex()}`, created_at: Math.floor(Date.now() / 1000) });

function responseOf(identity: ResponseIdentity, echo: ResponseEcho, model: string, output: OutputItem[], result?: CompletionResult): ResponseObject {
  const cut = result !== undefined && result.finishReason !== "stop";
  return {
    ...identity,
    object: "response",
    status: result === undefined ? "in_progress" : cut ? "incomplete" : "completed",
    error: null,
    // A reply cut by the generation cap or a shutdown also ends before its natural end, as Chat Completions' `length` says.
    incomplete_details: cut ? { reason: "max_output_tokens" } : null,
    model,
    output,
    previous_response_id: null,
    store: false,
    background: false,
    truncation: "auto",
    ...echo,
    usage: result
      ? {
          input_tokens: result.usage.prompt_tokens,
          input_tokens_details: { cached_tokens: result.usage.cached_tokens },
          output_tokens: result.usage.completion_tokens,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: result.usage.total_tokens,
        }
      : null,
  };
}

type ReasoningOutput = Extract<OutputItem, { type: "reasoning" }>;
type MessageOutput = Extract<OutputItem, { type: "message" }>;

const reasoningItem = (text: string, status: "in_progress" | "completed"): ReasoningOutput => ({
  type: "reasoning",
  id: `rs_${hex()}`,
  summary: [],
  content: [{ type: "reasoning_text", text }],
  status,
});

const messageItem = (text: string, status: "in_progress" | "completed" | "incomplete"): MessageOutput => ({
  type: "message",
  id: `msg_${hex()}`,
  status,
  role: "assistant",
  content: [{ type: "output_text", text, annotations: [], logprobs: [] }],
});

const callItem = (call: ToolCall): OutputItem => ({ type: "function_call", id: `fc_${hex()}`, call_id: call.id, name: call.name, arguments: call.arguments, status: "completed" });

/** The whole response of a turn that has ended. */
export function responseJson(identity: ResponseIdentity, echo: ResponseEcho, result: CompletionResult): ResponseObject {
  const status = result.finishReason === "stop" ? "completed" : "incomplete";
  const output = [
    ...(result.reasoning !== undefined ? [reasoningItem(result.reasoning, "completed")] : []),
    ...(result.text !== "" || !result.toolCalls ? [messageItem(result.text, status)] : []),
    ...(result.toolCalls ?? []).map(callItem),
  ];
  return responseOf(identity, echo, result.model, output, result);
}

/**
 * The stream: `response.created` and `response.in_progress`, then each item as it comes (added,
 * its deltas, done), then `response.completed` (or `response.incomplete`) with the whole response.
 * An item's text comes as deltas of its part, a call's arguments as deltas of the call.
 */
export function responsesFraming(identity: ResponseIdentity, echo: ResponseEcho): Framing<CompletionStart, CompletionResult> {
  let sequence = 0;
  let model = "";
  const output: OutputItem[] = [];
  /** The item being written, with its text so far. */
  let open: { item: ReasoningOutput | MessageOutput; text: string } | undefined;
  const send = (type: string, payload: object) => event(type, { type, sequence_number: sequence++, ...payload });
  const where = () => ({ output_index: output.length - 1, item_id: output.at(-1)!.id });

  const close = (status: "completed" | "incomplete" = "completed") => {
    if (!open) return [];
    const { item, text } = open;
    open = undefined;
    const done: ReasoningOutput | MessageOutput =
      item.type === "reasoning" ? { ...item, content: [{ type: "reasoning_text", text }], status: "completed" } : { ...messageItem(text, status), id: item.id };
    output[output.length - 1] = done;
    const part = done.content[0]!;
    return [
      send(item.type === "reasoning" ? "response.reasoning_text.done" : "response.output_text.done", { ...where(), content_index: 0, text, ...(item.type === "message" ? { logprobs: [] } : {}) }),
      send("response.content_part.done", { ...where(), content_index: 0, part }),
      send("response.output_item.done", { output_index: output.length - 1, item: done }),
    ];
  };

  const write = (type: "reasoning" | "message", delta: string) => {
    const opened = open?.item.type === type ? [] : [...close(), ...begin(type)];
    open!.text += delta;
    const name = type === "reasoning" ? "response.reasoning_text.delta" : "response.output_text.delta";
    return [...opened, send(name, { ...where(), content_index: 0, delta, ...(type === "message" ? { logprobs: [] } : {}) })];
  };

  const begin = (type: "reasoning" | "message") => {
    const item = type === "reasoning" ? reasoningItem("", "in_progress") : messageItem("", "in_progress");
    output.push(item);
    open = { item, text: "" };
    const empty = { ...item, content: [] };
    return [
      send("response.output_item.added", { output_index: output.length - 1, item: empty }),
      send("response.content_part.added", { ...where(), content_index: 0, part: item.content[0]! }),
    ];
  };

  return {
    start: (start) => {
      model = start.model;
      const response = responseOf(identity, echo, model, []);
      return [send("response.created", { response }), send("response.in_progress", { response })];
    },
    reasoning: (text) => write("reasoning", text),
    delta: (text) => write("message", text),
    toolCall: (part) => {
      switch (part.part) {
        case "open": {
          const item = callItem({ id: part.id, name: part.name, arguments: "" });
          const events = close();
          output.push(item);
          events.push(send("response.output_item.added", { output_index: output.length - 1, item: { ...item, status: "in_progress" } }));
          return events;
        }
        case "arguments":
          return [send("response.function_call_arguments.delta", { ...where(), delta: part.text })];
        case "close": {
          const item = { ...callItem(part.call), id: output.at(-1)!.id };
          output[output.length - 1] = item;
          return [
            send("response.function_call_arguments.done", { ...where(), name: part.call.name, arguments: part.call.arguments }),
            send("response.output_item.done", { output_index: output.length - 1, item }),
          ];
        }
      }
    },
    done: (result) => {
      const status = result.finishReason === "stop" ? "completed" : "incomplete";
      const events = close(status);
      // Every response without calls has a message, an empty one if the model said nothing.
      if (result.toolCalls === undefined && !output.some((item) => item.type === "message")) events.push(...begin("message"), ...close(status));
      const response = responseOf(identity, echo, model, output, result);
      return [...events, send(response.status === "completed" ? "response.completed" : "response.incomplete", { response })];
    },
    error: (error) => {
      const { error: body } = openAiErrorBody(error);
      return [send("error", { code: body.code, message: body.message, param: body.param })];
    },
  };
}
