// GGUF files (llama.cpp's format): the header — magic, version, metadata key/values, tensor
// infos — read through a bounded window, never the whole file; the tensors' bytes stay in
// the file and are referenced in place like a safetensors file's.
//
//   "GGUF" u32 version (2, 3) u64 tensor_count u64 kv_count
//   kv_count × { string key, u32 type, value }          (13 value types, arrays nest)
//   tensor_count × { string name, u32 n_dims, u64 ne[n_dims] (innermost first), u32 ggml_type, u64 offset }
//   padding to general.alignment (default 32), then the data section; offsets are relative
//   to it and aligned.
//
// The file may come from an attacker or a broken download, as a safetensors file may: it
// is read only if it is a regular file (files.ts), every count, length and offset is
// checked by arithmetic against the bytes left before anything is allocated for it, and
// every tensor must lie inside the file, aligned, overlapping no other (validate.ts). A
// refusal names the file and the key or tensor.
import fs from 'node:fs';
import path from 'node:path';
import { CheckpointError } from '../common/errors.js';
import { FILE_CAPS, openRegularFile } from './files.js';
import { checkTensorRanges } from './validate.js';

/** GGUF metadata value types, by their codes. */
export const GGUF_TYPE = {
  UINT8: 0,
  INT8: 1,
  UINT16: 2,
  INT16: 3,
  UINT32: 4,
  INT32: 5,
  FLOAT32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  UINT64: 10,
  INT64: 11,
  FLOAT64: 12,
} as const;
export type GgufTypeCode = (typeof GGUF_TYPE)[keyof typeof GGUF_TYPE];

const TYPE_NAMES = Object.fromEntries(Object.entries(GGUF_TYPE).map(([name, code]) => [code, name.toLowerCase()])) as Record<
  number,
  string
>;

export type GgufNumbers =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | Float64Array
  | BigUint64Array
  | BigInt64Array;

/** A metadata value with its type: 64-bit integers are bigints, numeric arrays typed arrays. */
export type GgufValue =
  | { type: Exclude<GgufTypeCode, 7 | 8 | 9 | 10 | 11>; value: number }
  | { type: 10 | 11; value: bigint }
  | { type: 7; value: boolean }
  | { type: 8; value: string }
  | { type: 9; of: GgufTypeCode; value: GgufNumbers | boolean[] | string[] | GgufValue[] };

/** ggml tensor types by id: the name every refusal uses, and for the types ctxprobe reads,
 * the block layout (values per block, bytes per block). Ids 4, 5 and 31–33 were removed
 * from ggml. */
export const GGML_TYPES: Record<number, { name: string; block?: number; bytes?: number }> = {
  0: { name: 'F32', block: 1, bytes: 4 },
  1: { name: 'F16', block: 1, bytes: 2 },
  2: { name: 'Q4_0', block: 32, bytes: 18 },
  3: { name: 'Q4_1', block: 32, bytes: 20 },
  6: { name: 'Q5_0' },
  7: { name: 'Q5_1' },
  8: { name: 'Q8_0', block: 32, bytes: 34 },
  9: { name: 'Q8_1' },
  10: { name: 'Q2_K' },
  11: { name: 'Q3_K' },
  12: { name: 'Q4_K', block: 256, bytes: 144 },
  13: { name: 'Q5_K', block: 256, bytes: 176 },
  14: { name: 'Q6_K', block: 256, bytes: 210 },
  15: { name: 'Q8_K' },
  16: { name: 'IQ2_XXS' },
  17: { name: 'IQ2_XS' },
  18: { name: 'IQ3_XXS' },
  19: { name: 'IQ1_S' },
  20: { name: 'IQ4_NL' },
  21: { name: 'IQ3_S' },
  22: { name: 'IQ2_S' },
  23: { name: 'IQ4_XS' },
  24: { name: 'I8' },
  25: { name: 'I16' },
  26: { name: 'I32' },
  27: { name: 'I64' },
  28: { name: 'F64' },
  29: { name: 'IQ1_M' },
  30: { name: 'BF16', block: 1, bytes: 2 },
  34: { name: 'TQ1_0' },
  35: { name: 'TQ2_0' },
  39: { name: 'MXFP4' },
};

/** The ggml type ids ctxprobe reads: the float types, and the quantized ones whose blocks
 * are handed on as they lie (gguf-weights.ts). */
export const GGML_FLOAT_TYPES = new Set([0, 1, 30]);

/** `Q2_K (10)`, or `unknown (77)`. */
export const ggmlTypeName = (id: number) => `${GGML_TYPES[id]?.name ?? 'unknown'} (${id})`;

export interface GgufTensorInfo {
  name: string;
  /** ggml's ne: innermost (contiguous) dimension first; a Hugging Face [out, in] weight is [in, out]. */
  dims: number[];
  /** ggml type id (GGML_TYPES). */
  type: number;
  /** Absolute byte offset of the tensor's data in the file, and its length. */
  offset: number;
  bytes: number;
}

export interface GgufFile {
  /** The path as given (messages), and the real folder and name (onnxruntime's external data). */
  file: string;
  dir: string;
  location: string;
  version: number;
  alignment: number;
  metadata: Map<string, GgufValue>;
  tensors: Map<string, GgufTensorInfo>;
  /** Where the data section starts and the file's size. */
  dataOffset: number;
  size: number;
}

/** Longest tensor name ggml takes (GGML_MAX_NAME 64, with its terminator), most dims. */
const MAX_NAME = 63;
const MAX_DIMS = 4;
/** Longest key, and most elements of one array (a 256k vocabulary's tokens; several
 * times the merges of the largest byte-level vocabularies), arrays nested at most this deep. */
const MAX_KEY = 65536;
const MAX_ARRAY = 1 << 24;
const MAX_DEPTH = 8;
/** Most values of the whole header that become objects of their own (strings, booleans,
 * arrays inside arrays; numbers are read as typed arrays): a 262144-token vocabulary with
 * its merges has under a million. 4M empty arrays in one unused key took 1.8 GB and 20 s. */
export const MAX_HEADER_VALUES = 1 << 21;
/** Most tensors a file may list: models have at most a few thousand (experts stacked;
 * DeepSeek-V3's file about 1,100). 2M empty tensor entries took 58 s and 2.4 GB to refuse. */
export const MAX_TENSORS = 1 << 16;
/** Most metadata keys (files have about 40). */
const MAX_KEYS = 1 << 16;

/** Read the header of a GGUF file and check its tensors' byte ranges. */
export function readGguf(file: string): GgufFile {
  // The real path: onnxruntime takes external data from its folder, and refuses a link out of it.
  let real: string;
  try {
    real = fs.realpathSync(file);
  } catch (e) {
    throw new CheckpointError(`${file}: cannot read it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  const { fd, size } = openRegularFile(real);
  try {
    return new HeaderReader(file, fd, size).read(real);
  } finally {
    fs.closeSync(fd);
  }
}

/** Bytes of the header through a window of the file: every read is checked against the
 * file's size and the header cap before anything is allocated for it. */
class HeaderReader {
  private window = Buffer.alloc(0);
  private windowStart = 0;
  private pos = 0;
  private readonly limit: number;
  /** Values made objects so far (MAX_HEADER_VALUES). */
  private values = 0;

  constructor(
    private readonly file: string,
    private readonly fd: number,
    private readonly size: number,
  ) {
    this.limit = Math.min(size, FILE_CAPS.ggufHeader);
  }

  private fail(what: string): CheckpointError {
    return new CheckpointError(`${this.file}: ${what}`);
  }

  /** Make `n` bytes at the position readable; refused past the file's end or the header cap. */
  private need(n: number, what: string): Buffer {
    if (this.pos + n > this.limit) {
      throw this.pos + n > this.size
        ? this.fail(
            `the file ends inside its header (${what} at byte ${this.pos} needs ${n} bytes; the file has ${this.size}): it is truncated or not GGUF`,
          )
        : this.fail(`${what} at byte ${this.pos} would take the header past ${FILE_CAPS.ggufHeader} bytes, more than any model's`);
    }
    const at = this.pos - this.windowStart;
    if (at < 0 || at + n > this.window.length) {
      const length = Math.min(Math.max(n, 1 << 20), this.limit - this.pos);
      const buf = Buffer.allocUnsafe(length);
      let got = 0;
      for (let r; got < length && (r = fs.readSync(this.fd, buf, got, length - got, this.pos + got)) > 0;) got += r;
      if (got < n) throw this.fail(`the file ended while its header was read (${what} at byte ${this.pos})`);
      this.window = buf.subarray(0, got);
      this.windowStart = this.pos;
    }
    const start = this.pos - this.windowStart;
    this.pos += n;
    return this.window.subarray(start, start + n);
  }

  private u32(what: string): number {
    return this.need(4, what).readUInt32LE(0);
  }

  /** A u64 count or size, refused above `max` (what the bytes left could hold). */
  private count(what: string, max: number): number {
    const v = this.need(8, what).readBigUInt64LE(0);
    if (v > BigInt(max)) {
      const capped = this.size > this.limit ? ` (a header takes at most ${FILE_CAPS.ggufHeader} bytes)` : '';
      throw this.fail(`${what} is ${v}, more than the ${max} the rest of the file${capped} could hold: it is truncated or forged`);
    }
    return Number(v);
  }

  private left(): number {
    return this.limit - this.pos;
  }

  private string(what: string, max = this.left()): string {
    const length = this.count(`${what}'s length`, Math.min(max, this.left()));
    return this.need(length, what).toString('utf8');
  }

  read(real: string): GgufFile {
    const magic = this.need(4, 'magic').toString('latin1');
    if (magic !== 'GGUF') throw this.fail(`not a GGUF file (magic ${JSON.stringify(magic)}, not "GGUF")`);
    const version = this.u32('version');
    if (version === 1) throw this.fail('GGUF version 1 (32-bit counts, 2023) is not supported: convert it again with a current llama.cpp');
    if (version !== 2 && version !== 3)
      throw this.fail(
        version > 0xffff
          ? `GGUF version ${version}: a big-endian file, which is not supported`
          : `GGUF version ${version} is not supported (2, 3)`,
      );
    // Each tensor info takes at least 24 bytes, each key/value at least 13.
    const tensorCount = this.count('tensor count', Math.floor(this.left() / 24));
    if (tensorCount > MAX_TENSORS) throw this.fail(`tensor count is ${tensorCount}, more than the ${MAX_TENSORS} any model has`);
    const kvCount = this.count('metadata key/value count', Math.floor(this.left() / 13));
    if (kvCount > MAX_KEYS) throw this.fail(`metadata key/value count is ${kvCount}, more than the ${MAX_KEYS} any model has`);
    const metadata = new Map<string, GgufValue>();
    for (let i = 0; i < kvCount; i++) {
      const key = this.string(`metadata key ${i}`, MAX_KEY);
      if (metadata.has(key)) throw this.fail(`metadata key ${key} appears twice`);
      metadata.set(key, this.value(key, this.u32(`${key}'s type`), 0));
    }
    const alignment = alignmentOf(this.file, metadata);
    const infos: { name: string; dims: number[]; type: number; offset: number }[] = [];
    const names = new Set<string>();
    for (let i = 0; i < tensorCount; i++) {
      const name = this.string(`tensor ${i}'s name`, 1 << 16);
      if (name.length > MAX_NAME)
        throw this.fail(`tensor ${JSON.stringify(name.slice(0, 80))}: its name is longer than ggml's ${MAX_NAME} bytes`);
      if (names.has(name)) throw this.fail(`tensor ${name} appears twice`);
      names.add(name);
      const nDims = this.u32(`tensor ${name}'s dimension count`);
      if (nDims < 1 || nDims > MAX_DIMS) throw this.fail(`tensor ${name}: ${nDims} dimensions (ggml has 1 to ${MAX_DIMS})`);
      const dims = Array.from({ length: nDims }, (_, d) => this.count(`tensor ${name}'s dimension ${d}`, Number.MAX_SAFE_INTEGER));
      const type = this.u32(`tensor ${name}'s type`);
      const offset = this.count(`tensor ${name}'s offset`, Number.MAX_SAFE_INTEGER);
      infos.push({ name, dims, type, offset });
    }
    const dataOffset = Math.ceil(this.pos / alignment) * alignment;
    if (dataOffset > this.size)
      throw this.fail(`the data section would start at byte ${dataOffset}, past the file's end (${this.size} bytes)`);
    const tensors = new Map(infos.map((t) => [t.name, this.tensor(t, alignment, dataOffset)] as const));
    checkTensorRanges(
      this.file,
      [...tensors.values()].map((t) => ({ name: t.name, begin: t.offset - dataOffset, end: t.offset - dataOffset + t.bytes })),
      this.size - dataOffset,
    );
    return {
      file: this.file,
      dir: path.dirname(real),
      location: path.basename(real),
      version,
      alignment,
      metadata,
      tensors,
      dataOffset,
      size: this.size,
    };
  }

  /** A tensor's byte length by arithmetic on its dims and type, refused for a type ctxprobe
   * does not read, rows that split a block, an unaligned offset or a size past 2^53. */
  private tensor(t: { name: string; dims: number[]; type: number; offset: number }, alignment: number, dataOffset: number): GgufTensorInfo {
    const layout = GGML_TYPES[t.type];
    if (layout?.block === undefined || layout.bytes === undefined)
      throw this.fail(
        `tensor ${t.name} has ggml type ${ggmlTypeName(t.type)}, which ctxprobe does not read (F32, F16, BF16; quantized Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)`,
      );
    if (t.dims[0]! % layout.block !== 0)
      throw this.fail(`tensor ${t.name}: rows of ${t.dims[0]} values do not split into ${layout.name} blocks of ${layout.block}`);
    const elements = t.dims.reduce((a, b) => a * b, 1);
    const bytes = (elements / layout.block) * layout.bytes;
    if (!Number.isSafeInteger(elements) || !Number.isSafeInteger(bytes) || dataOffset + t.offset + bytes > Number.MAX_SAFE_INTEGER)
      throw this.fail(`tensor ${t.name}: dims [${t.dims}] are too large`);
    if (t.offset % alignment !== 0) throw this.fail(`tensor ${t.name}: offset ${t.offset} is not a multiple of the alignment ${alignment}`);
    return { ...t, offset: dataOffset + t.offset, bytes };
  }

  private value(key: string, type: number, depth: number): GgufValue {
    const what = key; // named in a refusal
    switch (type) {
      case GGUF_TYPE.UINT8:
        return { type, value: this.need(1, what).readUInt8(0) };
      case GGUF_TYPE.INT8:
        return { type, value: this.need(1, what).readInt8(0) };
      case GGUF_TYPE.UINT16:
        return { type, value: this.need(2, what).readUInt16LE(0) };
      case GGUF_TYPE.INT16:
        return { type, value: this.need(2, what).readInt16LE(0) };
      case GGUF_TYPE.UINT32:
        return { type, value: this.need(4, what).readUInt32LE(0) };
      case GGUF_TYPE.INT32:
        return { type, value: this.need(4, what).readInt32LE(0) };
      case GGUF_TYPE.FLOAT32:
        return { type, value: this.need(4, what).readFloatLE(0) };
      case GGUF_TYPE.FLOAT64:
        return { type, value: this.need(8, what).readDoubleLE(0) };
      case GGUF_TYPE.UINT64:
        return { type, value: this.need(8, what).readBigUInt64LE(0) };
      case GGUF_TYPE.INT64:
        return { type, value: this.need(8, what).readBigInt64LE(0) };
      case GGUF_TYPE.BOOL: {
        const b = this.need(1, what).readUInt8(0);
        if (b > 1) throw this.fail(`metadata ${key}: bool byte ${b} is neither 0 nor 1`);
        return { type, value: b === 1 };
      }
      case GGUF_TYPE.STRING:
        return { type, value: this.string(key) };
      case GGUF_TYPE.ARRAY:
        return this.array(key, depth);
      default:
        throw this.fail(`metadata ${key} has value type ${type}, not a GGUF type (0–12)`);
    }
  }

  //   u32 element type, u64 count, count × element (an element may itself be an array)
  private array(key: string, depth: number): GgufValue {
    if (depth >= MAX_DEPTH) throw this.fail(`metadata ${key}: arrays nested more than ${MAX_DEPTH} deep`);
    const of = this.u32(`${key}'s element type`);
    const width = ELEMENT_BYTES[of];
    if (width === undefined) throw this.fail(`metadata ${key}: array element type ${of} is not a GGUF type (0–12)`);
    // Strings take at least their 8-byte length, arrays their 12-byte type and count.
    const n = this.count(`metadata ${key}'s element count`, Math.min(MAX_ARRAY, Math.floor(this.left() / width)));
    const typed = TYPED[of];
    if (typed) {
      const bytes = this.need(n * width, key);
      const copy = new Uint8Array(n * width);
      copy.set(bytes);
      return { type: GGUF_TYPE.ARRAY, of: of as GgufTypeCode, value: new typed(copy.buffer) };
    }
    this.values += n;
    if (this.values > MAX_HEADER_VALUES)
      throw this.fail(
        `metadata ${key}: ${n} more strings, booleans or arrays take the header past ${MAX_HEADER_VALUES}, more than any model's`,
      );
    const values: (boolean | string | GgufValue)[] = [];
    for (let i = 0; i < n; i++) {
      const v = this.value(`${key}[${i}]`, of, depth + 1);
      values.push(of === GGUF_TYPE.ARRAY ? v : (v.value as boolean | string));
    }
    return { type: GGUF_TYPE.ARRAY, of: of as GgufTypeCode, value: values as boolean[] | string[] | GgufValue[] };
  }
}

/** Smallest size of one array element of each type. */
const ELEMENT_BYTES: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 8: 8, 9: 12, 10: 8, 11: 8, 12: 8 };

const TYPED: Record<number, new (buffer: ArrayBuffer) => GgufNumbers> = {
  0: Uint8Array,
  1: Int8Array,
  2: Uint16Array,
  3: Int16Array,
  4: Uint32Array,
  5: Int32Array,
  6: Float32Array,
  10: BigUint64Array,
  11: BigInt64Array,
  12: Float64Array,
};

function alignmentOf(file: string, metadata: Map<string, GgufValue>): number {
  const v = metadata.get('general.alignment');
  if (v === undefined) return 32;
  const n = v.type === GGUF_TYPE.UINT32 ? v.value : -1;
  if (n <= 0 || (n & (n - 1)) !== 0)
    throw new CheckpointError(`${file}: general.alignment must be a power of two as a uint32 (got ${describeValue(v)})`);
  return n;
}

/** A value as a refusal shows it: its type and, for scalars, the value. */
export function describeValue(v: GgufValue): string {
  if (v.type === GGUF_TYPE.ARRAY) return `an array of ${TYPE_NAMES[v.of]}`;
  if (v.type === GGUF_TYPE.STRING) return `the string ${JSON.stringify(v.value.slice(0, 80))}`;
  return `${TYPE_NAMES[v.type]} ${String(v.value)}`;
}

/** A small F32 tensor's values (rotary factors), read by its byte range. */
export function readF32Tensor(g: GgufFile, name: string): Float32Array {
  const t = g.tensors.get(name);
  if (!t) throw new CheckpointError(`${g.file}: tensor ${name} is missing`);
  if (t.type !== 0 || t.dims.length !== 1 || t.dims[0]! > 1 << 16)
    throw new CheckpointError(`${g.file}: tensor ${name} must be a 1-D F32 tensor of rotary factors`);
  const buf = Buffer.alloc(t.bytes);
  const fd = fs.openSync(`${g.dir}/${g.location}`, 'r');
  try {
    if (fs.readSync(fd, buf, 0, t.bytes, t.offset) !== t.bytes)
      throw new CheckpointError(`${g.file}: tensor ${name}: the file ended while it was read`);
  } finally {
    fs.closeSync(fd);
  }
  return new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + t.bytes));
}
