/**
 * Pictures written without a library: PNGs (8 bits deep, no filter), the images the vision tests
 * and fixtures send, generated so that no image file is committed; and GIFs and JPEGs of chosen
 * structure, of which the limits refuse some.
 */
import { deflateSync } from "node:zlib";

/** A `width`×`height` picture whose pixel (x, y) is `pixel(x, y)` as [r, g, b]. */
export function png(width: number, height: number, pixel: (x: number, y: number) => readonly [number, number, number]): Uint8Array {
  const rows = new Uint8Array(height * (1 + 3 * width));
  for (let y = 0; y < height; y++) {
    const row = y * (1 + 3 * width);
    for (let x = 0; x < width; x++) rows.set(pixel(x, y), row + 1 + 3 * x);
  }
  return pngOf([pngChunk("IHDR", ihdr(width, height)), pngChunk("IDAT", deflateSync(rows))]);
}

const COLOUR = { grey: 0, rgb: 2 } as const;

/** A black `width`×`height` picture in 8-bit grey, quick to write at any size. */
export const blackPng = (width: number, height: number): Uint8Array =>
  pngOf([pngChunk("IHDR", ihdr(width, height, "grey")), pngChunk("IDAT", deflateSync(new Uint8Array(height * (1 + width))))]);

/** An IHDR chunk's data: the size, 8 bits deep, in RGB or in grey. */
export function ihdr(width: number, height: number, colour: keyof typeof COLOUR = "rgb"): Uint8Array {
  const header = new DataView(new ArrayBuffer(13));
  header.setUint32(0, width);
  header.setUint32(4, height);
  header.setUint8(8, 8); // bit depth
  header.setUint8(9, COLOUR[colour]);
  return new Uint8Array(header.buffer);
}

/** A PNG file of these chunks, then IEND. */
export const pngOf = (chunks: Uint8Array[]) =>
  concat([new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), ...chunks, pngChunk("IEND", new Uint8Array())]);

/** A PNG chunk: its length, type, data and CRC. */
export function pngChunk(type: string, data: Uint8Array): Uint8Array {
  const typed = concat([new TextEncoder().encode(type), data]);
  const out = new DataView(new ArrayBuffer(8 + data.length + 4));
  out.setUint32(0, data.length);
  new Uint8Array(out.buffer).set(typed, 4);
  out.setUint32(8 + data.length, Bun.hash.crc32(typed));
  return new Uint8Array(out.buffer);
}

/**
 * A GIF of a `screen`, two colours, with `frames` at their places: each frame's image is one
 * pixel's LZW code (what a 1×1 frame holds).
 */
export function gif(screen: Size, frames: readonly (Size & { left: number; top: number })[]): Uint8Array {
  const u16 = (value: number) => [value & 0xff, value >> 8];
  return Uint8Array.from([
    ...new TextEncoder().encode("GIF89a"),
    ...u16(screen.width),
    ...u16(screen.height),
    0x80, // a global colour table of two colours
    0,
    0,
    ...[0, 0, 0, 255, 255, 255],
    ...frames.flatMap((frame) => [0x2c, ...u16(frame.left), ...u16(frame.top), ...u16(frame.width), ...u16(frame.height), 0, 2, 2, 0x44, 0x01, 0]),
    0x3b,
  ]);
}

/** A JPEG's structure: a JFIF header, a start of frame of each size (baseline, one component), a scan of a few bytes. */
export function jpeg(frames: readonly Size[]): Uint8Array {
  const u16 = (value: number) => [value >> 8, value & 0xff];
  return Uint8Array.from([
    0xff,
    0xd8,
    ...[0xff, 0xe0, ...u16(16), ...new TextEncoder().encode("JFIF\0"), 1, 1, 0, 0, 1, 0, 1, 0, 0],
    ...frames.flatMap(({ width, height }) => [0xff, 0xc0, ...u16(11), 8, ...u16(height), ...u16(width), 1, 1, 0x11, 0]),
    ...[0xff, 0xda, ...u16(8), 1, 1, 0, 0, 63, 0],
    ...[0x12, 0xff, 0x00, 0x34, 0xff, 0xd0, 0x56],
    0xff,
    0xd9,
  ]);
}

type Size = { width: number; height: number };

export const concat = (parts: Uint8Array[]) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
};
