/**
 * Pictures as clients send them, to their bytes: a data URL (OpenAI's `image_url` and
 * `input_image`) or base64 (Anthropic's base64 source, Ollama's `images`, the native API's).
 * A remote URL is refused: the service is offline, and fetching one would let a client make the
 * server reach other hosts. The bytes must be a picture within its limits (chat/pictures.ts);
 * whether the model can see it is the engine's to say.
 */
import { mediaTypeOf, pictureProblem } from "../chat/pictures";
import { InvalidInput } from "../errors";

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const DATA_URL = /^data:([^,;]*)((?:;[^,;]*)*?);base64,(.*)$/s;

/** The bytes of a picture sent as base64 (whitespace allowed, as line-wrapped base64 has it). */
export function pictureFromBase64(field: string, base64: string): Uint8Array {
  const compact = base64.replace(/\s+/g, "");
  if (compact === "" || compact.length % 4 !== 0 || !BASE64.test(compact)) throw new InvalidInput(field, "must be a picture's bytes in base64");
  const data = Buffer.from(compact, "base64");
  const problem = pictureProblem(data);
  if (problem) throw new InvalidInput(field, problem);
  return data;
}

/** The bytes of a picture sent as a URL: a base64 data URL only. */
export function pictureFromUrl(field: string, url: string): Uint8Array {
  if (/^https?:/i.test(url)) {
    throw new InvalidInput(
      field,
      "a picture at a remote URL is not fetched (the service is offline, and fetching would let a client make it reach other hosts): send it as a data URL, data:image/png;base64,…",
    );
  }
  const match = DATA_URL.exec(url);
  if (!match) throw new InvalidInput(field, "must be a picture as a base64 data URL: data:image/png;base64,…");
  const type = match[1]!.toLowerCase();
  if (type !== "" && !type.startsWith("image/")) throw new InvalidInput(field, `is ${type}, not a picture (image/*)`);
  return pictureFromBase64(field, match[3]!);
}

/** A stored picture (its file in base64) as a data URL, its media type read from its bytes. */
export function pictureUrl(base64: string): string {
  const type = mediaTypeOf(Buffer.from(base64.slice(0, 24), "base64")) ?? "application/octet-stream";
  return `data:${type};base64,${base64}`;
}
