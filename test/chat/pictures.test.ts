/**
 * A picture's size is read by walking its structure, as a decoder would find it: what hides its
 * size, or is cut short, is refused from its bytes alone. (Through the served API:
 * test/http/picture-limits.test.ts.)
 */
import { describe, expect, test } from "bun:test";
import { PICTURE_LIMITS, PictureBudget, pictureProblem } from "../../src/chat/pictures";
import { blackPng, concat, gif, ihdr, jpeg, png, pngChunk, pngOf } from "../support/png";

const small = () => png(4, 3, () => [10, 20, 30]);

describe("PNG", () => {
  test("a whole PNG is taken; one whose IHDR is not its first chunk (Apple's CgBI before it) is refused, whatever follows", () => {
    expect(pictureProblem(small())).toBeUndefined();
    const decoy = pngOf([pngChunk("CgBI", ihdr(1, 1)), pngChunk("IHDR", ihdr(8192, 8192, "grey")), pngChunk("IDAT", new Uint8Array(8))]);
    expect(pictureProblem(decoy)).toContain("first chunk is no valid IHDR");
    expect(pictureProblem(pngOf([pngChunk("tEXt", new Uint8Array(4)), pngChunk("IHDR", ihdr(1, 1))]))).toContain("first chunk is no valid IHDR");
  });

  test("a PNG cut anywhere short of its IEND is refused; so are one with no image data, a second IHDR and an invalid IHDR", () => {
    const whole = small();
    for (let end = 8; end < whole.length; end += 3) expect(pictureProblem(whole.subarray(0, end))).toBeString();
    expect(pictureProblem(pngOf([pngChunk("IHDR", ihdr(2, 2))]))).toContain("without image data");
    const [signature, header, rest] = [whole.subarray(0, 8), whole.subarray(8, 33), whole.subarray(33)];
    expect(pictureProblem(concat([signature, header, header, rest]))).toContain("invalid IHDR");
    const deep = ihdr(2, 2);
    deep[8] = 3; // no bit depth RGB has
    expect(pictureProblem(pngOf([pngChunk("IHDR", deep), pngChunk("IDAT", new Uint8Array(4))]))).toContain("invalid IHDR");
  });

  test("one pixel past the limit is refused, the limit itself taken", () => {
    expect(pictureProblem(blackPng(4096, 4096))).toBeUndefined();
    expect(pictureProblem(blackPng(4097, 4096))).toContain("4097×4096 pixels");
  });
});

describe("GIF", () => {
  test("every frame must lie within the logical screen, and the blocks must run to the trailer", () => {
    const frame = { left: 0, top: 0, width: 1, height: 1 };
    expect(pictureProblem(gif({ width: 1, height: 1 }, [frame]))).toBeUndefined();
    expect(pictureProblem(gif({ width: 1, height: 1 }, [{ ...frame, left: 1 }]))).toContain("frame 1 (1×1 at 1,0) lies outside its 1×1 screen");
    expect(pictureProblem(gif({ width: 2, height: 2 }, [frame, { ...frame, width: 3 }]))).toContain("frame 2");
    const whole = gif({ width: 1, height: 1 }, [frame]);
    expect(pictureProblem(whole.subarray(0, whole.length - 1))).toContain("cut short");
    expect(pictureProblem(gif({ width: 1, height: 1 }, []))).toContain("without a frame");
  });

  test("the screen is what counts against the limit", () => {
    expect(pictureProblem(gif({ width: 65535, height: 65535 }, [{ left: 0, top: 0, width: 1, height: 1 }]))).toContain("65535×65535 pixels");
  });
});

describe("JPEG", () => {
  test("the largest of its frames counts; a file cut short or with no frame is refused", () => {
    expect(pictureProblem(jpeg([{ width: 64, height: 48 }]))).toBeUndefined();
    expect(
      pictureProblem(
        jpeg([
          { width: 8, height: 8 },
          { width: 8192, height: 8192 },
        ]),
      ),
    ).toContain("8192×8192 pixels");
    expect(pictureProblem(jpeg([]))).toContain("cut short");
    const whole = jpeg([{ width: 64, height: 48 }]);
    // Cut inside a segment: up to the scan's end, every cut is refused.
    for (const end of [3, 10, 22, 30, 38]) expect(pictureProblem(whole.subarray(0, end))).toContain("cut short");
  });
});

describe("BMP", () => {
  const bmp = (header: number, width: number, height: number, compression = 0) => {
    const data = new DataView(new ArrayBuffer(14 + header + 16));
    data.setUint8(0, 0x42);
    data.setUint8(1, 0x4d);
    data.setUint32(10, 14 + header, true);
    data.setUint32(14, header, true);
    if (header === 12) {
      data.setUint16(18, width, true);
      data.setUint16(20, height, true);
    } else {
      data.setInt32(18, width, true);
      data.setInt32(22, height, true);
      data.setUint32(30, compression, true);
    }
    return new Uint8Array(data.buffer);
  };

  test("its size from a header stb_image takes; another header, RLE, or a negative width is refused", () => {
    expect(pictureProblem(bmp(40, 4, -3))).toBeUndefined();
    expect(pictureProblem(bmp(12, 4, 3))).toBeUndefined();
    expect(pictureProblem(bmp(40, 8192, 8192))).toContain("8192×8192 pixels");
    expect(pictureProblem(bmp(64, 4, 3))).toContain("header");
    expect(pictureProblem(bmp(40, 4, 3, 1))).toContain("header");
    expect(pictureProblem(bmp(40, -4, 3))).toContain("header");
  });
});

describe("a request's pictures", () => {
  test(`at most ${PICTURE_LIMITS.perRequest}, and ${PICTURE_LIMITS.requestPixels} pixels together`, () => {
    const count = new PictureBudget();
    for (let i = 0; i < PICTURE_LIMITS.perRequest; i++) expect(count.take(small())).toBeUndefined();
    expect(count.full()).toContain(`picture ${PICTURE_LIMITS.perRequest + 1} of the request`);
    expect(count.take(small())).toBe(count.full()!);

    const pixels = new PictureBudget();
    const largest = blackPng(4096, 4096);
    for (let i = 0; i < PICTURE_LIMITS.requestPixels / PICTURE_LIMITS.pixels; i++) expect(pixels.take(largest)).toBeUndefined();
    expect(pixels.take(small())).toContain("more than the 67108864 one request's pictures may have together");
    // What is refused is not counted.
    expect(pixels.full()).toBeUndefined();
  });
});
