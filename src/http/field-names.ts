/**
 * How a protocol spells the domain's `Field`s as its own request fields. Each protocol's folder
 * has one `FieldNames` beside its presenter; a route plugin says which its requests use
 * (`namingFields`), and a refusal is spelled with it where it becomes the protocol's error body:
 * the error handler, the turn driver, a background response's stream.
 */
import { type DomainError, type Field, InvalidInput } from "../errors";
import { contextOf } from "./request-context";

/** The protocol's field for `field`; undefined where it has none (the domain's word is used then). */
export type FieldNames = (field: Field) => string | undefined;

/** `error` with its field spelled as `names` spell it. */
export function spelled(error: DomainError, names: FieldNames | undefined): DomainError {
  if (!(error instanceof InvalidInput) || typeof error.field === "string" || names === undefined) return error;
  const name = names(error.field);
  return name === undefined ? error : new InvalidInput(name, error.message);
}

/**
 * A `beforeHandle` hook for a route plugin, before its routes: their requests' refusals name
 * fields as `names` spell them. Local to the plugin, as a protocol's routes are.
 */
export const namingFields =
  (names: FieldNames) =>
  ({ request }: { request: Request }): void => {
    contextOf(request).fields = names;
  };
