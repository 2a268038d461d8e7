// A growable little-endian byte buffer for the GGUF header (metadata and tensor infos).
// Tensor data never goes through it: that is streamed straight to the file.

const utf8 = new TextEncoder();

export class ByteBuilder {
  private buf = new Uint8Array(1 << 16);
  private view = new DataView(this.buf.buffer);
  private len = 0;

  /** Grows the buffer for `n` more bytes and returns where they start. Call it before reading
   * `this.view`, which it may replace. */
  private reserve(n: number): number {
    const at = this.len;
    if (at + n > this.buf.length) {
      let size = this.buf.length * 2;
      while (size < at + n) size *= 2;
      const next = new Uint8Array(size);
      next.set(this.buf.subarray(0, at));
      this.buf = next;
      this.view = new DataView(next.buffer);
    }
    this.len = at + n;
    return at;
  }

  u8(v: number): void {
    const at = this.reserve(1);
    this.view.setUint8(at, v);
  }
  i8(v: number): void {
    const at = this.reserve(1);
    this.view.setInt8(at, v);
  }
  u16(v: number): void {
    const at = this.reserve(2);
    this.view.setUint16(at, v, true);
  }
  i16(v: number): void {
    const at = this.reserve(2);
    this.view.setInt16(at, v, true);
  }
  u32(v: number): void {
    const at = this.reserve(4);
    this.view.setUint32(at, v, true);
  }
  i32(v: number): void {
    const at = this.reserve(4);
    this.view.setInt32(at, v, true);
  }
  f32(v: number): void {
    const at = this.reserve(4);
    this.view.setFloat32(at, v, true);
  }
  f64(v: number): void {
    const at = this.reserve(8);
    this.view.setFloat64(at, v, true);
  }
  u64(v: bigint | number): void {
    const at = this.reserve(8);
    this.view.setBigUint64(at, BigInt(v), true);
  }
  i64(v: bigint): void {
    const at = this.reserve(8);
    this.view.setBigInt64(at, v, true);
  }
  bytes(b: Uint8Array): void {
    const at = this.reserve(b.length);
    this.buf.set(b, at);
  }
  /** GGUF string: u64 byte length, then UTF-8 bytes without a terminator. */
  string(s: string): void {
    const b = utf8.encode(s);
    this.u64(b.length);
    this.bytes(b);
  }
  padTo(alignment: number): void {
    const pad = (alignment - (this.len % alignment)) % alignment;
    const at = this.reserve(pad);
    this.buf.fill(0, at, this.len);
  }

  toBytes(): Uint8Array {
    return this.buf.slice(0, this.len);
  }
}
