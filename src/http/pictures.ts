/**
 * Pictures as clients send them, to their bytes: a data URL (OpenAI's `image_url` and
 * `input_image`) or base64 (Anthropic's base64 source, Ollama's `images`, the native API's).
 * A remote URL is refused unless the operator listed its host: the service is offline, and
 * fetching one would let a client make the server reach other hosts. The bytes must be a picture
 * within its limits, and a request's pictures within a request's (chat/pictures.ts); whether the
 * model can see them is the engine's to say.
 */
import { mediaTypeOf, PICTURE_LIMITS, PictureBudget } from "../chat/pictures";
import { InvalidInput, PayloadTooLarge } from "../errors";
import type { TurnImage } from "../llm/engine";
import { readCapped } from "./json-body";
import { contextOf } from "./request-context";

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const DATA_URL = /^data:([^,;]*)((?:;[^,;]*)*?);base64,(.*)$/s;

/**
 * A request's pictures, turned to their bytes as its protocol's conversion reads them, in order:
 * each a picture within its own limits, and together within one request's (chat/pictures.ts), so
 * that a request holding too many is refused at the first too many, before any is decoded (or, at
 * a remote URL, fetched). One per request.
 */
export class RequestPictures {
  private readonly budget = new PictureBudget();
  /** Each picture's field, in the order taken. */
  private readonly fields: string[] = [];

  /** `hosts`: those whose picture URLs a request may give (PARLEY_PICTURE_HOSTS); none for a protocol that takes no URL. */
  constructor(private readonly hosts: readonly string[] = []) {}

  /** The bytes of a picture sent as base64 (whitespace allowed, as line-wrapped base64 has it). */
  fromBase64(field: string, base64: string): Uint8Array {
    this.room(field);
    const compact = base64.replace(/\s+/g, "");
    if (compact === "" || compact.length % 4 !== 0 || !BASE64.test(compact)) throw new InvalidInput(field, "must be a picture's bytes in base64");
    return this.taken(field, Buffer.from(compact, "base64"));
  }

  /**
   * Pictures sent as base64 beside a message's text (the native API's, Ollama's), seen after it, as a
   * client shows a question with its pictures; `field` names the array.
   */
  after(text: string, images: readonly string[] | undefined, field: string): { images?: TurnImage[] } {
    return images?.length ? { images: images.map((image, i) => ({ data: this.fromBase64(`${field}[${i}]`, image), at: text.length })) } : {};
  }

  /**
   * The bytes of a picture sent as a URL: a base64 data URL, or an `http(s)` URL of a listed host,
   * fetched without following a redirect (which could lead to a host not listed), within
   * `FETCH_TIMEOUT_MS` and the picture's size limit.
   */
  async fromUrl(field: string, url: string): Promise<Uint8Array> {
    if (/^https?:/i.test(url)) {
      const remote = URL.parse(url);
      if (!remote || !this.hosts.includes(remote.hostname.toLowerCase())) {
        throw new InvalidInput(
          field,
          "a picture at a remote URL is fetched only from hosts the operator lists (PARLEY_PICTURE_HOSTS): send it as a data URL, data:image/png;base64,…",
        );
      }
      this.room(field);
      return this.taken(field, await fetchPicture(field, remote));
    }
    const match = DATA_URL.exec(url);
    if (!match) throw new InvalidInput(field, "must be a picture as a base64 data URL: data:image/png;base64,…");
    const type = match[1]!.toLowerCase();
    if (type !== "" && !type.startsWith("image/")) throw new InvalidInput(field, `is ${type}, not a picture (image/*)`);
    return this.fromBase64(field, match[3]!);
  }

  /** Refuses one more picture to a request that has its fill, before its bytes are read. */
  private room(field: string): void {
    const full = this.budget.full();
    if (full) throw new InvalidInput(field, full);
  }

  private taken(field: string, data: Uint8Array): Uint8Array {
    const problem = this.budget.take(data);
    if (problem) throw new InvalidInput(field, problem);
    this.fields.push(field);
    return data;
  }

  /**
   * The request's refusals name a picture the model refuses (the domain's `image` at its place
   * among the history's pictures) by the field it came in: for a request that sends its whole
   * history, whose pictures are the history's.
   */
  nameIn(request: Request): void {
    const context = contextOf(request);
    const { fields } = this;
    const names = context.fields;
    context.fields = (field) => (field.part === "image" ? fields[field.index] : undefined) ?? names?.(field);
  }
}

/** How long a listed host has to send a picture. */
const FETCH_TIMEOUT_MS = 10_000;

/**
 * A listed host's picture. Every failure (refused, reset, timed out, no such name, a status, a
 * redirect) gets one answer naming the host alone: the runtime's own message would quote its
 * internals and tell a client which of the host's ports are open.
 */
async function fetchPicture(field: string, url: URL): Promise<Uint8Array> {
  let data: Uint8Array | undefined;
  try {
    const response = await fetch(url, { redirect: "error", signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
    // Read as a request body is: a picture over its limit is cut off, not buffered whole.
    if (response.ok) data = await readCapped(response, PICTURE_LIMITS.bytes, FETCH_TIMEOUT_MS);
    else void response.body?.cancel().catch(() => undefined);
  } catch (error) {
    if (error instanceof PayloadTooLarge) throw new InvalidInput(field, `is more than the ${PICTURE_LIMITS.bytes} bytes a picture may have`);
  }
  if (data === undefined) throw new InvalidInput(field, `could not be fetched from ${url.hostname}`);
  return data;
}

/** A stored picture (its file in base64) as a data URL, its media type read from its bytes. */
export function pictureUrl(base64: string): string {
  const type = mediaTypeOf(Buffer.from(base64.slice(0, 24), "base64")) ?? "application/octet-stream";
  return `data:${type};base64,${base64}`;
}
