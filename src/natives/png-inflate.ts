/**
 * Whether a PNG's image data inflates to no more than its header's rows need. llama.cpp's image
 * loader (stb_image) inflates every IDAT byte into a buffer it grows without bound before it
 * compares the size with the header's: a 1×1 picture of a few megabytes of deflated zeros would
 * take gigabytes and seconds of a native thread. Inflated here first, off the event loop (zlib on
 * libuv's pool), and cut one byte past the bound.
 */
import { inflate } from "node:zlib";

const SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
/** Channels of each PNG colour type: grey, RGB, palette, grey with alpha, RGBA. */
const CHANNELS: Readonly<Record<number, number>> = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 };

/** False when `data` is a PNG whose image data inflates past what its rows take; true for any other file (its decoder judges it). */
export async function inflatesWithinRows(data: Uint8Array): Promise<boolean> {
  const png = idatOf(data);
  if (!png) return true;
  const limit = png.rowBytes + 1;
  return await new Promise<boolean>((resolve) =>
    inflate(png.idat, { maxOutputLength: limit }, (error) => resolve((error as NodeJS.ErrnoException | null)?.code !== "ERR_BUFFER_TOO_LARGE")),
  );
}

/** A PNG's image data, joined, and the most bytes its rows take (interlaced passes add a filter byte a row each); undefined for no PNG. */
function idatOf(data: Uint8Array): { idat: Buffer; rowBytes: number } | undefined {
  if (data.length < 33 || !SIGNATURE.every((byte, i) => data[i] === byte)) return undefined;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const [width, height, depth, colour] = [view.getUint32(16), view.getUint32(20), data[24]!, data[25]!];
  const channels = CHANNELS[colour];
  if (channels === undefined) return undefined;
  const row = 1 + Math.ceil((width * channels * depth) / 8);
  // Adam7's seven passes: no more than every row's bytes, and a filter byte for each pass's rows.
  const rowBytes = height * row + 7 * (height + 1);
  const parts: Uint8Array[] = [];
  for (let at = 8; at + 8 <= data.length; ) {
    const length = view.getUint32(at);
    const type = String.fromCharCode(data[at + 4]!, data[at + 5]!, data[at + 6]!, data[at + 7]!);
    if (type === "IDAT") parts.push(data.subarray(at + 8, Math.min(data.length, at + 8 + length)));
    if (type === "IEND") break;
    at += 12 + length;
  }
  return { idat: Buffer.concat(parts), rowBytes };
}
