/**
 * What a picture must be before any model is shown it: a file of a format llama.cpp's image loader
 * decodes (stb_image: PNG, JPEG, GIF's first frame, BMP) and within `PICTURE_LIMITS`, measured by
 * walking its structure (not by reading fixed offsets, which a decoder may read otherwise), so that
 * no native work starts on a picture too large to decode, or on a file cut short.
 */

export const PICTURE_LIMITS = {
  /** A picture's file, at most. */
  bytes: 20 * 2 ** 20,
  /** Its width times its height, at most: decoded, each pixel takes 3 bytes. */
  pixels: 4096 * 4096,
  /** Pictures one request may send, on any protocol. */
  perRequest: 16,
  /** The pixels of one request's pictures together, at most: each is decoded and resized before a model sees it. */
  requestPixels: 4 * 4096 * 4096,
} as const;

type Size = { width: number; height: number };

/** Why the bytes are no picture a model may be shown, or undefined when they may be. */
export function pictureProblem(data: Uint8Array): string | undefined {
  const measured = measure(data);
  return typeof measured === "string" ? measured : undefined;
}

/**
 * A request's pictures, taken one by one as it is read: each must pass `pictureProblem`, and
 * together they must stay within the limits of one request.
 */
export class PictureBudget {
  private count = 0;
  private pixels = 0;

  /** Why the request may not have one more picture, whatever it is: asked before fetching one. */
  full(): string | undefined {
    return this.count >= PICTURE_LIMITS.perRequest
      ? `is picture ${this.count + 1} of the request, more than the ${PICTURE_LIMITS.perRequest} a request may have`
      : undefined;
  }

  /** Why the request may not have this picture, or undefined when it takes it. */
  take(data: Uint8Array): string | undefined {
    const full = this.full();
    if (full) return full;
    const measured = measure(data);
    if (typeof measured === "string") return measured;
    const pixels = this.pixels + measured.width * measured.height;
    if (pixels > PICTURE_LIMITS.requestPixels) {
      return `brings the request's pictures to ${pixels} pixels, more than the ${PICTURE_LIMITS.requestPixels} one request's pictures may have together`;
    }
    this.count++;
    this.pixels = pixels;
    return undefined;
  }
}

/** The picture's media type, by its first bytes (as `pictureProblem` reads them); undefined for none it takes. */
export function mediaTypeOf(data: Uint8Array): string | undefined {
  const starts = (...bytes: number[]) => bytes.every((byte, i) => data[i] === byte);
  if (starts(...PNG_SIGNATURE)) return "image/png";
  if (starts(0x47, 0x49, 0x46, 0x38)) return "image/gif";
  if (starts(0x42, 0x4d)) return "image/bmp";
  if (starts(0xff, 0xd8)) return "image/jpeg";
  if (starts(0x52, 0x49, 0x46, 0x46) && new TextDecoder().decode(data.subarray(8, 12)) === "WEBP") return "image/webp";
  return undefined;
}

/** The picture's size, or why it is no picture a model may be shown. */
function measure(data: Uint8Array): Size | string {
  if (data.length > PICTURE_LIMITS.bytes) return `is ${data.length} bytes, more than the ${PICTURE_LIMITS.bytes} a picture may have`;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const type = mediaTypeOf(data);
  if (type === "image/webp") return "is WebP, which llama.cpp's image loader does not decode: send PNG, JPEG, GIF or BMP";
  const size =
    type === "image/png"
      ? pngSize(data, view)
      : type === "image/gif"
        ? gifSize(data, view)
        : type === "image/bmp"
          ? bmpSize(data, view)
          : type === "image/jpeg"
            ? jpegSize(data, view)
            : "is no picture: send PNG, JPEG, GIF or BMP";
  if (typeof size === "string") return size;
  const { width, height } = size;
  if (width < 1 || height < 1) return "is a picture of no pixels";
  if (width * height > PICTURE_LIMITS.pixels) return `is ${width}×${height} pixels, more than the ${PICTURE_LIMITS.pixels} a picture may have`;
  return size;
}

const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
/** Bit depths each PNG colour type allows. */
const PNG_DEPTHS: Readonly<Record<number, readonly number[]>> = { 0: [1, 2, 4, 8, 16], 2: [8, 16], 3: [1, 2, 4, 8], 4: [8, 16], 6: [8, 16] };
const fourCC = (data: Uint8Array, at: number) => latin1(data, at, at + 4);
/** Bytes as the characters of their values: a chunk's type, a file's signature. */
const latin1 = (data: Uint8Array, from: number, to: number) => Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("latin1", from, to);

/**
 * A PNG's size from its IHDR, which must be its first chunk: stb_image also takes Apple's CgBI
 * chunk before it, so a size read at fixed offsets could be a decoy's. Every chunk must lie within
 * the file up to IEND, with image data among them: a file cut short is refused here, not by the
 * decoder after it has been stored or begun.
 */
function pngSize(data: Uint8Array, view: DataView): Size | string {
  const cut = "is a PNG cut short or malformed (its chunks do not run whole to IEND)";
  if (data.length < 8 + 12 + 13 || view.getUint32(8) !== 13 || fourCC(data, 12) !== "IHDR") {
    return "is a PNG whose first chunk is no valid IHDR (Apple's CgBI PNGs are not taken)";
  }
  const [width, height, depth, colour] = [view.getUint32(16), view.getUint32(20), data[24]!, data[25]!];
  if (!PNG_DEPTHS[colour]?.includes(depth) || data[26] !== 0 || data[27] !== 0 || data[28]! > 1) return "is a PNG with an invalid IHDR";
  let hasData = false;
  for (let at = 8 + 12 + 13; ; ) {
    if (at + 12 > data.length) return cut;
    const length = view.getUint32(at);
    const type = fourCC(data, at + 4);
    if (length > 0x7fffffff || !/^[A-Za-z]{4}$/.test(type) || at + 12 + length > data.length) return cut;
    if (type === "IHDR" || type === "CgBI") return "is a PNG with an invalid IHDR";
    if (type === "IEND") return hasData ? { width, height } : "is a PNG without image data";
    hasData ||= type === "IDAT";
    at += 12 + length;
  }
}

/**
 * A GIF's logical screen, whose pixels stb_image decodes; every frame must lie within it (a frame
 * outside it fails the decoder), and its blocks must run whole to the trailer.
 */
function gifSize(data: Uint8Array, view: DataView): Size | string {
  const cut = "is a GIF cut short or malformed (its blocks do not run whole to its trailer)";
  if (data.length < 13 || !["GIF87a", "GIF89a"].includes(latin1(data, 0, 6))) return cut;
  const screen = { width: view.getUint16(6, true), height: view.getUint16(8, true) };
  const colourTable = (packed: number) => (packed & 0x80 ? 3 * 2 ** ((packed & 7) + 1) : 0);
  /** Where the sub-blocks starting at `at` end, past their empty one; undefined if they run past the file. */
  const subBlocksEnd = (at: number): number | undefined => {
    while (at < data.length) {
      const length = data[at]!;
      at += 1 + length;
      if (length === 0) return at;
    }
    return undefined;
  };
  let frames = 0;
  let at: number | undefined = 13 + colourTable(data[10]!);
  while (at !== undefined && at < data.length) {
    const block = data[at]!;
    if (block === 0x3b) return frames > 0 ? screen : "is a GIF without a frame";
    if (block === 0x21) {
      at = at + 1 < data.length ? subBlocksEnd(at + 2) : undefined;
    } else if (block === 0x2c) {
      if (at + 10 > data.length) return cut;
      const [left, top, width, height] = [0, 2, 4, 6].map((offset) => view.getUint16(at! + 1 + offset, true)) as [number, number, number, number];
      if (left + width > screen.width || top + height > screen.height) {
        return `is a GIF whose frame ${frames + 1} (${width}×${height} at ${left},${top}) lies outside its ${screen.width}×${screen.height} screen`;
      }
      frames++;
      // The local colour table, the LZW code size, then the image's sub-blocks.
      at = subBlocksEnd(at + 10 + colourTable(data[at + 9]!) + 1);
    } else {
      return cut;
    }
  }
  return cut;
}

/** BMP's header sizes stb_image takes (core, info, and the later versions of info). */
const BMP_HEADERS = [12, 40, 56, 108, 124];

/** A BMP's size, from a header of a size stb_image decodes, uncompressed or in bit fields (not RLE), within the file. */
function bmpSize(data: Uint8Array, view: DataView): Size | string {
  const invalid = "is a BMP with a header stb_image does not take (or one cut short)";
  if (data.length < 26) return invalid;
  const header = view.getUint32(14, true);
  if (!BMP_HEADERS.includes(header) || data.length < 14 + header || view.getUint32(10, true) > data.length) return invalid;
  if (header === 12) return { width: view.getUint16(18, true), height: view.getUint16(20, true) };
  const [width, height, compression] = [view.getInt32(18, true), view.getInt32(22, true), view.getUint32(30, true)];
  if (width < 0 || height === -0x80000000 || (compression !== 0 && compression !== 3)) return invalid;
  return { width, height: Math.abs(height) };
}

/**
 * A JPEG's size: the largest of its start-of-frame segments (a decoder may read any of them), its
 * segments walked through to the first scan after a frame, entropy-coded data skipped to the next
 * marker. A file that ends inside a segment, or has no frame and scan, is refused.
 */
function jpegSize(data: Uint8Array, view: DataView): Size | string {
  const cut = "is a JPEG cut short or malformed (no frame and scan, or a segment running past its end)";
  let size: Size | undefined;
  let scanned = false;
  let at = 2;
  while (at + 1 < data.length) {
    if (data[at] !== 0xff) {
      // Entropy-coded data runs to the next marker: 0xFF followed by neither 0x00 (a stuffed byte) nor a restart.
      if (!scanned) return cut;
      const next = data.indexOf(0xff, at);
      if (next < 0) break;
      at = next;
      continue;
    }
    const marker = data[at + 1]!;
    // Fill bytes, stuffed bytes and markers without a length.
    if (marker === 0xff) {
      at++;
      continue;
    }
    if (marker === 0x00 || marker === 0x01 || (marker >= 0xd0 && marker <= 0xd8)) {
      at += 2;
      continue;
    }
    if (marker === 0xd9) break;
    if (at + 4 > data.length) return cut;
    const length = view.getUint16(at + 2);
    if (length < 2 || at + 2 + length > data.length) return cut;
    // SOF0 to SOF15, but DHT, JPG and DAC.
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      if (length < 8) return cut;
      const frame = { width: view.getUint16(at + 7), height: view.getUint16(at + 5) };
      if (!size || frame.width * frame.height > size.width * size.height) size = frame;
    }
    if (marker === 0xda) {
      if (!size) return cut;
      scanned = true;
    }
    at += 2 + length;
  }
  return size && scanned ? size : cut;
}
