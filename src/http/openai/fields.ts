/** How OpenAI's generating APIs spell the domain's fields (field-names.ts). */
import type { FieldNames } from "../field-names";

/** Chat completions' request fields. */
export const chatCompletionFields: FieldNames = (field) => {
  switch (field.part) {
    case "history":
      return field.item === undefined ? "messages" : `messages[${field.item}]${field.detail === "answers" ? ".tool_call_id" : ""}`;
    case "image":
      return "messages";
    case "format":
      return "response_format";
    case "tools":
      return "tools";
    case "tool":
      return `tools[${field.index}].function.${field.detail}`;
    case "toolChoice":
      return "tool_choice";
    case "tokenBias":
      return "logit_bias";
    case "logprobs":
      return "logprobs";
    default:
      return undefined;
  }
};

const SERVER_TOOL_FIELDS = { label: "server_label", url: "server_url", headers: "headers", allowedTools: "allowed_tools" } as const;

/** The Responses and Conversations APIs' request fields. */
export const responseFields: FieldNames = (field) => {
  switch (field.part) {
    case "history":
      return field.item === undefined ? "input" : `input[${field.item}]${field.detail === "answers" ? ".call_id" : ""}`;
    case "image":
      return "input";
    case "format":
      return "text.format";
    case "tools":
      return "tools";
    case "tool":
      return `tools[${field.index}].${field.detail}`;
    case "serverTool":
      return `tools[${field.index}].${SERVER_TOOL_FIELDS[field.detail]}`;
    case "toolChoice":
      return "tool_choice";
    case "logprobs":
      return "top_logprobs";
    case "continues":
      return "previous_response_id";
    case "conversation":
      return "conversation";
    case "detached":
      return "background";
    case "pageAfter":
      return "after";
    default:
      return undefined;
  }
};

/** The legacy completions' request fields: the prompt is its whole history, or with a suffix what it fills in after; the rest as chat completions'. */
export const textCompletionFields: FieldNames = (field) =>
  field.part === "history" ? "prompt" : field.part === "infill" ? "suffix" : chatCompletionFields(field);

/** The embeddings API's request fields: the texts pooled are its inputs. */
export const embeddingFields: FieldNames = (field) => (field.part === "input" ? `input[${field.index}]` : undefined);
