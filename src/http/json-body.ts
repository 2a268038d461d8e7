import { InvalidJson, PayloadTooLarge, UnsupportedMediaType } from "../errors";

/** Reads at most `limit` bytes, so a huge or endless (chunked) body is refused without being buffered. */
async function readCapped(request: Request, limit: number): Promise<Uint8Array> {
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > limit) throw new PayloadTooLarge(limit);
  if (!request.body) return new Uint8Array(0);
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of request.body) {
    size += chunk.byteLength;
    if (size > limit) throw new PayloadTooLarge(limit);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/**
 * A route `parse` hook for JSON bodies: checks the media type, then the size, then the
 * encoding and syntax. Without it Elysia would parse `text/plain` too and report 422.
 */
export const jsonBody =
  (limit: number) =>
  async ({ request }: { request: Request }): Promise<unknown> => {
    const [mediaType = "", ...params] = (request.headers.get("content-type") ?? "").split(";").map((part) => part.trim().toLowerCase());
    const charset = params.find((param) => param.startsWith("charset="))?.slice(8).replace(/"/g, "");
    if (mediaType !== "application/json" || (charset !== undefined && charset !== "utf-8")) {
      throw new UnsupportedMediaType("the request body must be application/json (UTF-8)");
    }
    const bytes = await readCapped(request, limit);
    try {
      return JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
    } catch {
      throw new InvalidJson();
    }
  };
