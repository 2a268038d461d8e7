/** How Ollama's generating API spells the domain's fields (field-names.ts). */
import type { FieldNames } from "../field-names";

export const ollamaFields: FieldNames = (field) => {
  switch (field.part) {
    case "infill":
      return "suffix";
    case "history":
      return field.item === undefined ? "messages" : `messages[${field.item}]${field.detail === "answers" ? ".tool_name" : ""}`;
    case "image":
      return "messages";
    case "format":
      return "format";
    case "tools":
      return "tools";
    case "tool":
      return `tools[${field.index}].function.${field.detail}`;
    case "thoughtBudget":
      return "think";
    case "context":
      return "options.num_ctx";
    default:
      return undefined;
  }
};

/** `/api/generate`'s: one prompt is its whole history. */
export const ollamaGenerateFields: FieldNames = (field) => (field.part === "history" ? "prompt" : ollamaFields(field));
