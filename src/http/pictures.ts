/**
 * Pictures as clients send them, to their bytes: a data URL (OpenAI's `image_url` and
 * `input_image`) or base64 (Anthropic's base64 source, Ollama's `images`, the native API's).
 * A remote URL is refused unless the operator listed its host: the service is offline, and
 * fetching one would let a client make the server reach other hosts. The bytes must be a picture within its limits (chat/pictures.ts);
 * whether the model can see it is the engine's to say.
 */
import { mediaTypeOf, PICTURE_LIMITS, pictureProblem } from "../chat/pictures";
import { InvalidInput, PayloadTooLarge } from "../errors";
import type { TurnImage } from "../llm/engine";
import { readCapped } from "./json-body";

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

/**
 * Pictures sent as base64 beside a message's text (the native API's, Ollama's), seen after it, as a
 * client shows a question with its pictures; `field` names the array.
 */
export const picturesAfter = (text: string, images: readonly string[] | undefined, field: string): { images?: TurnImage[] } =>
  images?.length ? { images: images.map((image, i) => ({ data: pictureFromBase64(`${field}[${i}]`, image), at: text.length })) } : {};

/** How long a listed host has to send a picture. */
const FETCH_TIMEOUT_MS = 10_000;

/**
 * The bytes of a picture sent as a URL: a base64 data URL, or an `http(s)` URL of a host the
 * operator listed (`hosts`, PARLEY_PICTURE_HOSTS), fetched without following a redirect (which
 * could lead to a host not listed), within `FETCH_TIMEOUT_MS` and the picture's size limit.
 */
export async function pictureFromUrl(field: string, url: string, hosts: readonly string[]): Promise<Uint8Array> {
  if (/^https?:/i.test(url)) {
    const remote = URL.parse(url);
    if (!remote || !hosts.includes(remote.hostname.toLowerCase())) {
      throw new InvalidInput(
        field,
        "a picture at a remote URL is fetched only from hosts the operator lists (PARLEY_PICTURE_HOSTS): send it as a data URL, data:image/png;base64,…",
      );
    }
    return await fetchPicture(field, remote);
  }
  const match = DATA_URL.exec(url);
  if (!match) throw new InvalidInput(field, "must be a picture as a base64 data URL: data:image/png;base64,…");
  const type = match[1]!.toLowerCase();
  if (type !== "" && !type.startsWith("image/")) throw new InvalidInput(field, `is ${type}, not a picture (image/*)`);
  return pictureFromBase64(field, match[3]!);
}

async function fetchPicture(field: string, url: URL): Promise<Uint8Array> {
  let data: Uint8Array;
  try {
    const response = await fetch(url, { redirect: "error", signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
    if (!response.ok) throw new Error(`${url.host} answered ${response.status}`);
    // Read as a request body is: a picture over its limit is cut off, not buffered whole.
    data = await readCapped(response, PICTURE_LIMITS.bytes, FETCH_TIMEOUT_MS);
  } catch (error) {
    if (error instanceof PayloadTooLarge) throw new InvalidInput(field, `is more than the ${PICTURE_LIMITS.bytes} bytes a picture may have`);
    throw new InvalidInput(field, `could not be fetched: ${error instanceof Error ? error.message : String(error)}`);
  }
  const problem = pictureProblem(data);
  if (problem) throw new InvalidInput(field, problem);
  return data;
}

/** A stored picture (its file in base64) as a data URL, its media type read from its bytes. */
export function pictureUrl(base64: string): string {
  const type = mediaTypeOf(Buffer.from(base64.slice(0, 24), "base64")) ?? "application/octet-stream";
  return `data:${type};base64,${base64}`;
}
