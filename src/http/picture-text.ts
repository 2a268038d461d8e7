/**
 * The text of a request that may carry pictures, apart from them: a route takes pictures within
 * the picture body limit, but everything else in the body (messages, tools, schemas) is text the
 * model will tokenize, and stays within the text body limit as on every other route. A picture is
 * a string where every protocol puts one: an element of `images` (Ollama's, the native API's), an
 * `image_url` or its `url` (OpenAI's), a `source`'s `data` or `url` (Anthropic's). Whatever such a
 * string holds is decoded as a picture and held to a picture's limits, never tokenized.
 */
import { PayloadTooLarge } from "../errors";

const PICTURE_KEYS = new Set(["images", "image_url"]);
const SOURCE_KEYS = new Set(["data", "url"]);

/**
 * `PayloadTooLarge` when the body (of `bytes`) holds more than `limit` bytes of text: its strings
 * (in UTF-8), numbers and field names, but the pictures' strings.
 */
export function checkTextBesidePictures(body: unknown, bytes: number, limit: number): void {
  if (bytes <= limit) return;
  const text = textBytes(body, undefined, undefined);
  if (text > limit) throw new PayloadTooLarge(limit, `the request's text beside its pictures must be at most ${limit} bytes (it has ${text})`);
}

/** The bytes of text in `value`, found under `key`, itself under `parent`. */
function textBytes(value: unknown, key: string | undefined, parent: string | undefined): number {
  if (typeof value === "string") {
    const picture =
      (key !== undefined && PICTURE_KEYS.has(key)) || (parent === "image_url" && key === "url") || (parent === "source" && SOURCE_KEYS.has(key ?? ""));
    return picture ? 0 : Buffer.byteLength(value);
  }
  if (Array.isArray(value)) {
    // An array's elements stand where the array does: `images[i]` is a picture as `images` would be.
    let sum = 0;
    for (const element of value) sum += textBytes(element, key, parent);
    return sum;
  }
  if (value === null || typeof value !== "object") return String(value).length;
  let sum = 0;
  for (const [name, field] of Object.entries(value)) sum += Buffer.byteLength(name) + textBytes(field, name, key);
  return sum;
}
