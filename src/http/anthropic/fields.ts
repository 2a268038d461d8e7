/** How Anthropic's Messages API spells the domain's fields (field-names.ts). */
import type { FieldNames } from "../field-names";

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
    case "toolChoice":
      return "tool_choice";
    case "thoughtBudget":
      return "thinking";
    default:
      return undefined;
  }
};
