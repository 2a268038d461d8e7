/** How llama-server's `/infill` spells the domain's fields (field-names.ts). */
import type { FieldNames } from "../field-names";

export const infillFields: FieldNames = (field) => {
  switch (field.part) {
    case "infill":
      return field.detail === "start" ? "prompt" : "input_suffix";
    case "model":
      return "model";
    case "sampler":
      return "samplers";
    default:
      return undefined;
  }
};
