/** How Anthropic's Messages API spells the domain's fields (field-names.ts). */
import type { FieldNames } from "../field-names";

const SERVER_FIELDS = { label: "name", url: "url", headers: "authorization_token", allowedTools: "tool_configuration.allowed_tools" } as const;

export const anthropicFields: FieldNames = (field) => {
  switch (field.part) {
    case "history":
      return field.item === undefined ? "messages" : `messages[${field.item}]${field.detail === "answers" ? ".tool_use_id" : ""}`;
    case "image":
      return "messages";
    case "tools":
      return "tools";
    case "tool":
      return `tools[${field.index}].${field.detail === "parameters" ? "input_schema" : "name"}`;
    case "serverTool":
      return `mcp_servers[${field.index}].${SERVER_FIELDS[field.detail]}`;
    case "toolChoice":
      return "tool_choice";
    case "thoughtBudget":
      return "thinking";
    default:
      return undefined;
  }
};
