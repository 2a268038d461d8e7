import { InvalidJson, PayloadTooLarge, RequestTimeout, UnsupportedMediaType } from "../errors";
import { checkTextBesidePictures } from "./picture-text";

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
    let body: unknown;
    try {
      body = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
    } catch {
      throw new InvalidJson();
    }
    if (pictures) checkTextBesidePictures(body, bytes.length, limits.bodyLimitBytes);
    return body;
  };
