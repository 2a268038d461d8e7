/**
 * A PNG of given RGB pixels, written without a library (8-bit RGB, no filter): the images the
 * vision tests and fixtures send, generated so that no image file is committed.
 */
import { deflateSync } from "node:zlib";

/** A `width`×`height` picture whose pixel (x, y) is `pixel(x, y)` as [r, g, b]. */
export function png(width: number, height: number, pixel: (x: number, y: number) => readonly [number, number, number]): Uint8Array {
  const rows = new Uint8Array(height * (1 + 3 * width));
  for (let y = 0; y < height; y++) {
    const row = y * (1 + 3 * width);
    for (let x = 0; x < width; x++) rows.set(pixel(x, y), row + 1 + 3 * x);
  }
  const header = new DataView(new ArrayBuffer(13));
  header.setUint32(0, width);
  header.setUint32(4, height);
  header.setUint8(8, 8); // bit depth
  header.setUint8(9, 2); // colour type: RGB
  return concat([
    new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", new Uint8Array(header.buffer)),
    chunk("IDAT", deflateSync(rows)),
    chunk("IEND", new Uint8Array()),
  ]);
}

function chunk(type: string, data: Uint8Array): Uint8Array {
  const typed = concat([new TextEncoder().encode(type), data]);
  const out = new DataView(new ArrayBuffer(8 + data.length + 4));
  out.setUint32(0, data.length);
  new Uint8Array(out.buffer).set(typed, 4);
  out.setUint32(8 + data.length, Bun.hash.crc32(typed));
  return new Uint8Array(out.buffer);
}

const concat = (parts: Uint8Array[]) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
};
