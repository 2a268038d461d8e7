/** Checking real bodies against the OpenAPI document a server serves. */
import Ajv2020, { type ValidateFunction } from "ajv/dist/2020";
import addFormats from "ajv-formats";

export interface ServedDocument {
  /** The schema at this JSON pointer of the document, its segments unescaped; throws when it has none. */
  schemaAt(...segments: string[]): ValidateFunction;
  /** Throws, naming `what` and the mismatch, unless `body` matches `validate`. */
  expectValid(validate: ValidateFunction, body: unknown, what: string): void;
  /** Throws unless `body` matches what the document gives `method path` for this status and media type. */
  expectDocumented(path: string, method: string, status: number, body: unknown, mediaType?: string): void;
}

export async function servedDocument(url: string): Promise<ServedDocument> {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  ajv.addSchema((await (await fetch(`${url}/openapi.json`)).json()) as object, "openapi.json");
  const schemaAt = (...segments: string[]) => {
    const pointer = segments.map((s) => `/${s.replaceAll("~", "~0").replaceAll("/", "~1")}`).join("");
    const validate = ajv.getSchema(`openapi.json#${pointer}`);
    if (!validate) throw new Error(`the document has no schema at ${pointer}`);
    return validate;
  };
  const expectValid = (validate: ValidateFunction, body: unknown, what: string) => {
    if (!validate(body)) throw new Error(`${what} does not match the document: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(body).slice(0, 500)}`);
  };
  return {
    schemaAt,
    expectValid,
    expectDocumented: (path, method, status, body, mediaType = "application/json") =>
      expectValid(
        schemaAt("paths", path, method, "responses", String(status), "content", mediaType, "schema"),
        body,
        `${method.toUpperCase()} ${path} ${status}`,
      ),
  };
}
