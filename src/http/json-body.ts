import { InvalidInput, InvalidJson, PayloadTooLarge, RequestTimeout, UnsupportedMediaType } from "../errors";
import { checkTextBesidePictures } from "./picture-text";
import { UNKNOWN_FIELD_RULE } from "./sampling-fields";

export interface BodyLimits {
  bodyLimitBytes: number;
  /** For a route whose requests may carry pictures, in base64. */
  pictureBodyLimitBytes: number;
  /** Hosts whose picture URLs a request may give, fetched (PARLEY_PICTURE_HOSTS). */
  pictureHosts: readonly string[];
  /** How long the whole body may take to arrive. */
  bodyTimeoutMs: number;
}

/**
 * Reads at most `limit` bytes within `bodyTimeoutMs` (`PayloadTooLarge`, `RequestTimeout`), so a
 * huge, endless (chunked) or trickled body is refused without being buffered and without holding a
 * connection open for minutes: a request's, or a response's.
 */
export async function readCapped(message: Request | Response, limit: number, bodyTimeoutMs: number): Promise<Uint8Array> {
  const declared = message.headers.get("content-length");
  if (declared !== null && Number(declared) > limit) throw new PayloadTooLarge(limit);
  if (!message.body) return new Uint8Array(0);
  const reader = message.body.getReader();
  let timer: Timer | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new RequestTimeout(bodyTimeoutMs / 1000)), bodyTimeoutMs);
  });
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (let read = await Promise.race([reader.read(), late]); !read.done; read = await Promise.race([reader.read(), late])) {
      size += read.value.byteLength;
      if (size > limit) throw new PayloadTooLarge(limit);
      chunks.push(read.value);
    }
  } catch (error) {
    void reader.cancel().catch(() => undefined);
    throw error;
  } finally {
    clearTimeout(timer);
  }
  return Buffer.concat(chunks);
}

/** A key spelled `__proto__` in the body's text, literally or with an escape for one of its characters. */
const MAY_HOLD_PROTO = /__proto__|\\u00[5-7]/i;

/**
 * Where the body has a key named `__proto__`, as a field's path (`messages[0].__proto__`).
 * JSON.parse makes it an own property, but a copy by assignment (TypeBox's `Value.Clone`, which
 * Elysia's validation may run) makes it the copy's prototype, whose keys then read as fields.
 */
function protoKeyPath(body: unknown): string | undefined {
  const pending: [value: unknown, path: string][] = [[body, ""]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [value, path] = next;
    if (typeof value !== "object" || value === null) continue;
    if (Array.isArray(value)) {
      for (const [index, item] of value.entries()) pending.push([item, `${path}[${index}]`]);
      continue;
    }
    for (const [key, item] of Object.entries(value)) {
      const at = path === "" ? key : `${path}.${key}`;
      if (key === "__proto__") return at;
      pending.push([item, at]);
    }
  }
  return undefined;
}

/**
 * A route `parse` hook for JSON bodies: checks the media type, then the size, then the
 * encoding and syntax. Without it Elysia would parse `text/plain` too and report 422.
 * `anyMediaType`: the body is JSON whatever its declared type, as Ollama's server reads it (its
 * documentation's examples send curl's default, form-urlencoded). `pictures`: the route's requests
 * may carry pictures, within `pictureBodyLimitBytes`, and text beside them within `bodyLimitBytes`.
 */
export const jsonBody =
  (limits: BodyLimits, { anyMediaType = false, pictures = false } = {}) =>
  async ({ request }: { request: Request }): Promise<unknown> => {
    const [mediaType = "", ...params] = (request.headers.get("content-type") ?? "").split(";").map((part) => part.trim().toLowerCase());
    const charset = params
      .find((param) => param.startsWith("charset="))
      ?.slice(8)
      .replace(/"/g, "");
    if ((!anyMediaType && mediaType !== "application/json") || (charset !== undefined && charset !== "utf-8")) {
      throw new UnsupportedMediaType("the request body must be application/json (UTF-8)");
    }
    const bytes = await readCapped(request, pictures ? limits.pictureBodyLimitBytes : limits.bodyLimitBytes, limits.bodyTimeoutMs);
    let text: string;
    let body: unknown;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
      body = JSON.parse(text);
    } catch {
      throw new InvalidJson();
    }
    const proto = MAY_HOLD_PROTO.test(text) ? protoKeyPath(body) : undefined;
    if (proto !== undefined) throw new InvalidInput(proto, UNKNOWN_FIELD_RULE);
    if (pictures) checkTextBesidePictures(body, bytes.length, limits.bodyLimitBytes);
    return body;
  };
