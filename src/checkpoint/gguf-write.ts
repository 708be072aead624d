// Writing GGUF files (gguf.ts reads them): the benchmark's llama.cpp peer runs ctxprobe's
// weights from one (bench/gguf.ts), and the tests write every family's fixture as llama.cpp's
// converter would (test/gguf-convert.ts). Metadata values are typed as the reader returns
// them; tensors are raw bytes with ggml's dims (innermost first), each aligned.
import fs from 'node:fs';
import { GGUF_TYPE, type GgufValue } from './gguf.js';

export interface GgufTensorData {
  name: string;
  /** ggml's ne: innermost first. */
  dims: number[];
  /** ggml type id. */
  type: number;
  /** Its bytes, or a count of zero bytes left as a hole in the file (models of real shapes
   * for memory and speed benches cost no disk: a zero ggml block dequantizes to zeros). */
  data: Uint8Array | { zeros: number };
  /** The offset to write in its info (tests of broken files); default: where it is written. */
  offset?: number;
}

export interface GgufWriteOptions {
  version?: number;
  /** general.alignment (also written as metadata when not 32). */
  alignment?: number;
}

/** Write a GGUF file: header, metadata in the order given, tensor infos, then each tensor
 * padded to the alignment. */
export function writeGguf(
  file: string,
  metadata: Iterable<[string, GgufValue]>,
  tensors: GgufTensorData[],
  options: GgufWriteOptions = {},
): void {
  const alignment = options.alignment ?? 32;
  const meta = [...metadata];
  if (alignment !== 32 && !meta.some(([k]) => k === 'general.alignment'))
    meta.push(['general.alignment', { type: GGUF_TYPE.UINT32, value: alignment }]);
  const w = new Bytes();
  w.raw(Buffer.from('GGUF', 'latin1'));
  w.u32(options.version ?? 3);
  w.u64(tensors.length);
  w.u64(meta.length);
  for (const [key, value] of meta) {
    w.string(key);
    w.u32(value.type);
    w.value(value);
  }
  let offset = 0;
  for (const t of tensors) {
    w.string(t.name);
    w.u32(t.dims.length);
    for (const d of t.dims) w.u64(d);
    w.u32(t.type);
    w.u64(t.offset ?? offset);
    offset += padded(byteLength(t.data), alignment);
  }
  w.raw(Buffer.alloc(padded(w.size, alignment) - w.size));
  const fd = fs.openSync(file, 'w');
  try {
    const header = w.buffer();
    fs.writeSync(fd, header);
    let at = header.length;
    for (const t of tensors) {
      if (!('zeros' in t.data)) fs.writeSync(fd, t.data, 0, t.data.length, at);
      at += padded(byteLength(t.data), alignment);
    }
    fs.ftruncateSync(fd, at);
  } finally {
    fs.closeSync(fd);
  }
}

const padded = (n: number, alignment: number) => Math.ceil(n / alignment) * alignment;
const byteLength = (data: GgufTensorData['data']) => ('zeros' in data ? data.zeros : data.length);

/** A little-endian byte buffer built piece by piece. */
class Bytes {
  private chunks: Buffer[] = [];
  size = 0;

  raw(b: Uint8Array): void {
    this.chunks.push(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
    this.size += b.byteLength;
  }

  private scalar(bytes: number, write: (b: Buffer) => void): void {
    const b = Buffer.alloc(bytes);
    write(b);
    this.raw(b);
  }

  buffer(): Buffer {
    return Buffer.concat(this.chunks);
  }

  u32(v: number): void {
    this.scalar(4, (b) => b.writeUInt32LE(v));
  }

  u64(v: number | bigint): void {
    this.scalar(8, (b) => b.writeBigUInt64LE(BigInt(v)));
  }

  string(s: string): void {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.raw(b);
  }

  value(v: GgufValue): void {
    switch (v.type) {
      case GGUF_TYPE.UINT8:
        return this.scalar(1, (b) => b.writeUInt8(v.value));
      case GGUF_TYPE.INT8:
        return this.scalar(1, (b) => b.writeInt8(v.value));
      case GGUF_TYPE.UINT16:
        return this.scalar(2, (b) => b.writeUInt16LE(v.value));
      case GGUF_TYPE.INT16:
        return this.scalar(2, (b) => b.writeInt16LE(v.value));
      case GGUF_TYPE.UINT32:
        return this.u32(v.value);
      case GGUF_TYPE.INT32:
        return this.scalar(4, (b) => b.writeInt32LE(v.value));
      case GGUF_TYPE.FLOAT32:
        return this.scalar(4, (b) => b.writeFloatLE(v.value));
      case GGUF_TYPE.FLOAT64:
        return this.scalar(8, (b) => b.writeDoubleLE(v.value));
      case GGUF_TYPE.UINT64:
        return this.u64(v.value);
      case GGUF_TYPE.INT64:
        return this.scalar(8, (b) => b.writeBigInt64LE(v.value));
      case GGUF_TYPE.BOOL:
        return this.scalar(1, (b) => b.writeUInt8(v.value ? 1 : 0));
      case GGUF_TYPE.STRING:
        return this.string(v.value);
      case GGUF_TYPE.ARRAY:
        return this.array(v);
    }
  }

  //   u32 element type, u64 count, the elements (typed arrays as their bytes)
  private array(v: Extract<GgufValue, { type: 9 }>): void {
    this.u32(v.of);
    this.u64(v.value.length);
    if (ArrayBuffer.isView(v.value)) return this.raw(new Uint8Array(v.value.buffer, v.value.byteOffset, v.value.byteLength));
    for (const x of v.value as (boolean | string | GgufValue)[]) {
      if (v.of === GGUF_TYPE.ARRAY) {
        const inner = x as GgufValue;
        this.value(inner);
      } else this.value({ type: v.of, value: x } as GgufValue);
    }
  }
}

/** Metadata values by type, for writers: `meta.u32(5)`, `meta.strings([...])`. */
export const meta = {
  u32: (value: number): GgufValue => ({ type: GGUF_TYPE.UINT32, value }),
  i32: (value: number): GgufValue => ({ type: GGUF_TYPE.INT32, value }),
  f32: (value: number): GgufValue => ({ type: GGUF_TYPE.FLOAT32, value }),
  bool: (value: boolean): GgufValue => ({ type: GGUF_TYPE.BOOL, value }),
  str: (value: string): GgufValue => ({ type: GGUF_TYPE.STRING, value }),
  strings: (value: string[]): GgufValue => ({ type: GGUF_TYPE.ARRAY, of: GGUF_TYPE.STRING, value }),
  f32s: (value: ArrayLike<number>): GgufValue => ({ type: GGUF_TYPE.ARRAY, of: GGUF_TYPE.FLOAT32, value: Float32Array.from(value) }),
  i32s: (value: ArrayLike<number>): GgufValue => ({ type: GGUF_TYPE.ARRAY, of: GGUF_TYPE.INT32, value: Int32Array.from(value) }),
  bools: (value: boolean[]): GgufValue => ({ type: GGUF_TYPE.ARRAY, of: GGUF_TYPE.BOOL, value }),
};
