/** How the rerank API spells the domain's fields (field-names.ts): the texts ranked are its documents. */
import type { FieldNames } from "../field-names";

export const rerankFields: FieldNames = (field) => (field.part === "input" ? `documents[${field.index}]` : undefined);
