/**
 * What a picture must be before any model is shown it: a file of a format llama.cpp's image loader
 * decodes (stb_image: PNG, JPEG, GIF's first frame, BMP) and within `PICTURE_LIMITS`, read from its
 * header alone, so that no native work starts on a picture too large to decode.
 */

export const PICTURE_LIMITS = {
  /** A picture's file, at most. */
  bytes: 20 * 2 ** 20,
  /** Its width times its height, at most: decoded, each pixel takes 3 bytes. */
  pixels: 4096 * 4096,
} as const;

/** Why the bytes are no picture a model may be shown, or undefined when they may be. */
export function pictureProblem(data: Uint8Array): string | undefined {
  if (data.length > PICTURE_LIMITS.bytes) return `is ${data.length} bytes, more than the ${PICTURE_LIMITS.bytes} a picture may have`;
  const size = sizeOf(data);
  if (size === "webp") return "is WebP, which llama.cpp's image loader does not decode: send PNG, JPEG, GIF or BMP";
  if (!size) return "is no picture: send PNG, JPEG, GIF or BMP";
  const { width, height } = size;
  if (width < 1 || height < 1) return "is a picture of no pixels";
  if (width * height > PICTURE_LIMITS.pixels) return `is ${width}×${height} pixels, more than the ${PICTURE_LIMITS.pixels} a picture may have`;
  return undefined;
}

/** The picture's media type, by its first bytes (as `pictureProblem` reads them); undefined for none it takes. */
export function mediaTypeOf(data: Uint8Array): string | undefined {
  const starts = (...bytes: number[]) => bytes.every((byte, i) => data[i] === byte);
  if (starts(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)) return "image/png";
  if (starts(0x47, 0x49, 0x46, 0x38)) return "image/gif";
  if (starts(0x42, 0x4d)) return "image/bmp";
  if (starts(0xff, 0xd8)) return "image/jpeg";
  if (starts(0x52, 0x49, 0x46, 0x46) && new TextDecoder().decode(data.subarray(8, 12)) === "WEBP") return "image/webp";
  return undefined;
}

type Size = { width: number; height: number } | "webp" | undefined;

function sizeOf(data: Uint8Array): Size {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  switch (mediaTypeOf(data)) {
    case "image/png":
      return data.length >= 24 ? { width: view.getUint32(16), height: view.getUint32(20) } : undefined;
    case "image/gif":
      return data.length >= 10 ? { width: view.getUint16(6, true), height: view.getUint16(8, true) } : undefined;
    case "image/bmp":
      return data.length >= 26 ? { width: Math.abs(view.getInt32(18, true)), height: Math.abs(view.getInt32(22, true)) } : undefined;
    case "image/jpeg":
      return jpegSize(data, view);
    case "image/webp":
      return "webp";
    default:
      return undefined;
  }
}

/** A JPEG's size, from its first start-of-frame segment. */
function jpegSize(data: Uint8Array, view: DataView): Size {
  let at = 2;
  while (at + 9 < data.length) {
    if (data[at] !== 0xff) return undefined;
    const marker = data[at + 1]!;
    // Fill bytes, and markers without a length.
    if (marker === 0xff) {
      at++;
      continue;
    }
    if (marker === 0xd8 || marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      at += 2;
      continue;
    }
    // SOF0 to SOF15, but DHT, JPG and DAC.
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      return { width: view.getUint16(at + 7), height: view.getUint16(at + 5) };
    }
    at += 2 + view.getUint16(at + 2);
  }
  return undefined;
}
