// Reads a GGUF file's header (metadata and tensor infos) without touching the tensor data,
// e.g. to describe a model or to check what the writer produced. Lengths read from the file
// are checked against its size before anything is allocated, so a corrupt file fails cleanly.

import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { GGUF_VALUE_TYPE, type GgufValue, type GgufValueType } from "./values";
import { GGUF_ALIGNMENT, GGUF_MAGIC } from "./writer";

export interface GgufTensorInfo {
  readonly name: string;
  readonly shape: readonly number[];
  /** ggml_type id (0 = F32, 1 = F16, others are quantisations). */
  readonly typeId: number;
  /** Byte offset from the start of the tensor data section. */
  readonly offset: number;
}

export interface GgufHeader {
  readonly version: number;
  readonly metadata: Readonly<Record<string, GgufValue>>;
  readonly tensors: readonly GgufTensorInfo[];
  /** Absolute file offset where tensor data starts. */
  readonly dataOffset: number;
}

const TYPE_BY_ID = new Map(Object.entries(GGUF_VALUE_TYPE).map(([name, id]) => [id, name as GgufValueType]));
const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Sequential little-endian reads over `read(position, into) => bytesRead`, buffered in chunks. */
class Cursor {
  private buf = new Uint8Array(0);
  private view = new DataView(this.buf.buffer);
  private start = 0; // file position of buf[0]
  pos = 0;

  constructor(
    private readonly size: number,
    private readonly read: (position: number, into: Uint8Array) => number,
  ) {}

  private need(n: number): number {
    if (this.pos + n > this.size) throw new Error(`GGUF file truncated at byte ${this.pos}`);
    if (this.pos + n > this.start + this.buf.length) {
      const len = Math.min(Math.max(n, 1 << 20), this.size - this.pos);
      const buf = new Uint8Array(len);
      let got = 0;
      while (got < len) {
        const r = this.read(this.pos + got, buf.subarray(got));
        if (r === 0) throw new Error(`GGUF file truncated at byte ${this.pos + got}`);
        got += r;
      }
      this.buf = buf;
      this.view = new DataView(buf.buffer);
      this.start = this.pos;
    }
    const at = this.pos - this.start;
    this.pos += n;
    return at;
  }

  /** Reads through `view` only after need(), which may replace it. */
  private at<T>(n: number, get: (view: DataView, offset: number) => T): T {
    const offset = this.need(n);
    return get(this.view, offset);
  }

  u8 = () => this.at(1, (v, o) => v.getUint8(o));
  i8 = () => this.at(1, (v, o) => v.getInt8(o));
  u16 = () => this.at(2, (v, o) => v.getUint16(o, true));
  i16 = () => this.at(2, (v, o) => v.getInt16(o, true));
  u32 = () => this.at(4, (v, o) => v.getUint32(o, true));
  i32 = () => this.at(4, (v, o) => v.getInt32(o, true));
  f32 = () => this.at(4, (v, o) => v.getFloat32(o, true));
  f64 = () => this.at(8, (v, o) => v.getFloat64(o, true));
  u64 = () => this.at(8, (v, o) => v.getBigUint64(o, true));
  i64 = () => this.at(8, (v, o) => v.getBigInt64(o, true));

  /** A u64 count or size that must fit in the rest of the file at `minBytes` bytes per unit. */
  count(minBytes: number): number {
    const n = this.u64();
    if (n * BigInt(minBytes) > BigInt(this.size - this.pos)) throw new Error(`GGUF length ${n} at byte ${this.pos - 8} exceeds the file`);
    return Number(n);
  }

  string(): string {
    const n = this.count(1);
    const at = this.need(n);
    return utf8.decode(this.buf.subarray(at, at + n));
  }
}

const MIN_SIZE: Record<GgufValueType, number> = {
  u8: 1,
  i8: 1,
  bool: 1,
  u16: 2,
  i16: 2,
  u32: 4,
  i32: 4,
  f32: 4,
  u64: 8,
  i64: 8,
  f64: 8,
  string: 8,
  array: 12,
};

function valueType(c: Cursor): GgufValueType {
  const id = c.u32();
  const type = TYPE_BY_ID.get(id as never);
  if (type === undefined) throw new Error(`unknown GGUF value type ${id} at byte ${c.pos - 4}`);
  return type;
}

function readValue(c: Cursor, type: GgufValueType): GgufValue {
  switch (type) {
    case "u8":
    case "i8":
    case "u16":
    case "i16":
    case "u32":
    case "i32":
    case "f32":
    case "f64":
      return { type, value: c[type]() };
    case "u64":
    case "i64":
      return { type, value: c[type]() };
    case "bool":
      return { type, value: c.u8() !== 0 };
    case "string":
      return { type, value: c.string() };
    case "array": {
      const itemType = valueType(c);
      const n = c.count(MIN_SIZE[itemType]);
      const items = Array.from({ length: n }, () => {
        const item = readValue(c, itemType);
        return item.type === "array" ? item : item.value;
      });
      return { type, itemType, items } as GgufValue;
    }
  }
}

export function readGgufHeader(path: string): GgufHeader {
  const fd = openSync(path, "r");
  try {
    const c = new Cursor(fstatSync(fd).size, (position, into) => readSync(fd, into, 0, into.length, position));
    if (c.u32() !== GGUF_MAGIC) throw new Error(`${path} is not a GGUF file`);
    const version = c.u32();
    // Version 1 used 32-bit counts; 2 and 3 share this layout.
    if (version !== 2 && version !== 3) throw new Error(`unsupported GGUF version ${version}`);
    const nTensors = c.count(8 + 4 + 4 + 8);
    const nKv = c.count(8 + 4);

    const metadata: Record<string, GgufValue> = {};
    for (let i = 0; i < nKv; i++) {
      const key = c.string();
      metadata[key] = readValue(c, valueType(c));
    }
    const tensors: GgufTensorInfo[] = [];
    for (let i = 0; i < nTensors; i++) {
      const name = c.string();
      const nDims = c.u32();
      if (nDims < 1 || nDims > 4) throw new Error(`tensor ${name} has ${nDims} dimensions`);
      const shape = Array.from({ length: nDims }, () => Number(c.u64()));
      tensors.push({ name, shape, typeId: c.u32(), offset: Number(c.u64()) });
    }
    const align = metadata["general.alignment"];
    const alignment = align?.type === "u32" ? align.value : GGUF_ALIGNMENT;
    return { version, metadata, tensors, dataOffset: Math.ceil(c.pos / alignment) * alignment };
  } finally {
    closeSync(fd);
  }
}
