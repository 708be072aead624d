// Safetensors files: read the headers (the graph points into the files, it never copies
// them) and write small checkpoints (the default model and the test families).
import fs from 'node:fs';
import path from 'node:path';
import type { ExternalTensor } from '../graph/builder.js';
import { bf16ToF32, f16ToF32, f32ToBf16, f32ToF16, type DTypeName } from '../common/dtypes.js';
import { CheckpointError } from '../common/errors.js';
import { FILE_CAPS, checkpointFile, openRegularFile, readJsonObject, type CheckpointLinks } from './files.js';
import { checkTensorRanges } from './validate.js';

const DTYPES: Record<string, { name: DTypeName; bytes: number }> = {
  F32: { name: 'float32', bytes: 4 },
  F16: { name: 'float16', bytes: 2 },
  BF16: { name: 'bfloat16', bytes: 2 },
  // GPTQ / AWQ packed integers and act-order indices (hf-quantized.ts); never a float weight.
  I32: { name: 'int32', bytes: 4 },
};

export interface StoredTensor extends ExternalTensor {
  /** The real folder `location` is relative to: the checkpoint's weights folder (Hugging
   * Face cache snapshots are symlinks into blobs/). */
  dir: string;
  /** The path the checkpoint names, for error messages. */
  file: string;
}

/** Every tensor of a checkpoint directory, from `model.safetensors` or a sharded index. */
export class SafetensorsCheckpoint {
  readonly tensors = new Map<string, StoredTensor>();
  /** The one real folder all weight files live in: ORT resolves `location` against it. */
  readonly weightsDir: string;

  constructor(
    readonly dir: string,
    links: CheckpointLinks = 'follow',
  ) {
    const files = weightFiles(dir, links);
    for (const file of files) this.readHeader(file);
    // ORT resolves every location against one folder: where shards link into several (a
    // DVC cache's content-addressed folders), the folder above them all, each location
    // relative to it (one folder, as usual: the file's name, the graph unchanged).
    const dirs = [...new Set([...this.tensors.values()].map((t) => t.dir))];
    this.weightsDir = dirs.length > 0 ? dirs.reduce(commonFolder) : dir;
    for (const t of this.tensors.values()) {
      t.location = path.relative(this.weightsDir, path.join(t.dir, t.location));
      t.dir = this.weightsDir;
    }
  }

  private readHeader(file: string): void {
    const real = fs.realpathSync(file);
    const { fd, size } = openRegularFile(real);
    try {
      const lenBuf = Buffer.alloc(8);
      fs.readSync(fd, lenBuf, 0, 8, 0);
      const headerLen = size >= 8 ? Number(lenBuf.readBigUInt64LE(0)) : 0;
      // The format caps the header at 100 MB; a larger length is not a safetensors file.
      if (headerLen <= 0 || headerLen > 100_000_000 || 8 + headerLen > size)
        throw new CheckpointError(`${file}: not a safetensors file (header length ${headerLen}, file ${size} bytes)`);
      const headerBuf = Buffer.alloc(headerLen);
      if (fs.readSync(fd, headerBuf, 0, headerLen, 8) !== headerLen) throw new CheckpointError(`${file}: the file ended inside its header`);
      let header: unknown;
      try {
        header = JSON.parse(headerBuf.toString('utf8'));
      } catch {
        throw new CheckpointError(`${file}: safetensors header is not JSON`);
      }
      if (header === null || typeof header !== 'object' || Array.isArray(header))
        throw new CheckpointError(`${file}: safetensors header is not a JSON object`);
      const ranges = Object.entries(header as Record<string, any>)
        .filter(([name]) => name !== '__metadata__')
        .map(([name, info]) => ({ name, ...headerEntry(file, name, info) }));
      checkTensorRanges(file, ranges, size - 8 - headerLen);
      for (const { name, dtype, shape, begin, end } of ranges) {
        if (this.tensors.has(name)) throw new CheckpointError(`${file}: tensor ${name} is also in ${this.tensors.get(name)!.file}`);
        this.tensors.set(name, {
          dtype,
          shape,
          location: path.basename(real),
          offset: 8 + headerLen + begin,
          length: end - begin,
          dir: path.dirname(real),
          file,
        });
      }
    } finally {
      fs.closeSync(fd);
    }
  }

  /** The real paths of the weights files (as the session opens them). */
  get files(): string[] {
    return [...new Set([...this.tensors.values()].map((t) => path.join(t.dir, t.location)))];
  }

  get(name: string, expectedShape?: number[]): StoredTensor {
    const t = this.tensors.get(name);
    if (!t) throw new CheckpointError(`${this.dir}: tensor ${name} is missing from the checkpoint`);
    if (expectedShape && (expectedShape.length !== t.shape.length || expectedShape.some((d, i) => d !== t.shape[i]))) {
      throw new CheckpointError(`${t.file}: tensor ${name} has shape [${t.shape}], config says [${expectedShape}]`);
    }
    return t;
  }

  has(name: string): boolean {
    return this.tensors.has(name);
  }

  /** One tensor's bytes as stored (small tensors: GPTQ's g_idx). */
  readBytes(name: string): Buffer {
    const t = this.get(name);
    const buf = Buffer.alloc(t.length);
    const fd = fs.openSync(path.join(t.dir, t.location), 'r');
    try {
      if (fs.readSync(fd, buf, 0, t.length, t.offset) !== t.length) throw new CheckpointError(`${t.file}: the file ends inside tensor ${name}`);
    } finally {
      fs.closeSync(fd);
    }
    return buf;
  }

  /** Read one tensor's values into memory as float32 (tests and small tables only). */
  readFloat32(name: string): Float32Array {
    const t = this.get(name);
    const buf = Buffer.alloc(t.length);
    const fd = fs.openSync(path.join(t.dir, t.location), 'r');
    try {
      fs.readSync(fd, buf, 0, t.length, t.offset);
    } finally {
      fs.closeSync(fd);
    }
    const n = t.length / (t.dtype === 'float32' ? 4 : 2);
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      if (t.dtype === 'float32') out[i] = buf.readFloatLE(i * 4);
      else if (t.dtype === 'bfloat16') out[i] = bf16ToF32(buf.readUInt16LE(i * 2));
      else out[i] = f16ToF32(buf.readUInt16LE(i * 2));
    }
    return out;
  }
}

/** One tensor's header entry, checked: dtype, shape, and byte range agreeing with them. */
function headerEntry(file: string, name: string, info: any): { dtype: DTypeName; shape: number[]; begin: number; end: number } {
  const bad = (what: string) => new CheckpointError(`${file}: tensor ${name}: ${what}`);
  if (info === null || typeof info !== 'object') throw bad('its header entry is not an object');
  const dtype = DTYPES[info.dtype];
  if (!dtype) throw bad(`dtype ${JSON.stringify(info.dtype)} is not supported (F32, F16, BF16; I32 for GPTQ / AWQ packed integers)`);
  const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
  if (!Array.isArray(info.shape) || !info.shape.every(isCount)) throw bad(`shape ${JSON.stringify(info.shape)} is not a list of sizes`);
  const offsets = info.data_offsets;
  if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(isCount) || offsets[1]! < offsets[0]!)
    throw bad(`data_offsets ${JSON.stringify(offsets)} are not [begin, end] byte offsets`);
  const [begin, end] = offsets as [number, number];
  const bytes = (info.shape as number[]).reduce((a, b) => a * b, dtype.bytes);
  if (!Number.isSafeInteger(bytes) || end - begin !== bytes)
    throw bad(`data (${end - begin} bytes) disagrees with shape [${info.shape}] ${info.dtype} (${bytes} bytes)`);
  return { dtype: dtype.name, shape: info.shape, begin, end };
}

/** The deepest folder holding both `a` and `b` (real, absolute paths). */
function commonFolder(a: string, b: string): string {
  const [x, y] = [a.split(path.sep), b.split(path.sep)];
  let n = 0;
  while (n < x.length && n < y.length && x[n] === y[n]) n++;
  return x.slice(0, n).join(path.sep) || path.sep;
}

function weightFiles(dir: string, links: CheckpointLinks): string[] {
  const index = checkpointFile(dir, 'model.safetensors.index.json', links);
  if (fs.existsSync(index)) {
    const map: unknown = readJsonObject(index, CheckpointError, FILE_CAPS.shardIndex).weight_map ?? {};
    if (
      map === null ||
      typeof map !== 'object' ||
      Object.values(map).some((f) => typeof f !== 'string' || f.includes('..') || path.isAbsolute(f))
    )
      throw new CheckpointError(`${index}: weight_map must map tensor names to file names in the folder`);
    const files = [...new Set(Object.values(map as Record<string, string>))];
    if (files.length === 0) throw new CheckpointError(`${index}: empty weight_map`);
    return files.map((f) => checkpointFile(dir, f, links));
  }
  const single = checkpointFile(dir, 'model.safetensors', links);
  if (fs.existsSync(single)) return [single];
  throw new CheckpointError(`${dir}: no model.safetensors or model.safetensors.index.json`);
}

// ---- writing --------------------------------------------------------------------------

export interface TensorData {
  shape: number[];
  data: Float32Array;
}

const CODES: Record<DTypeName, string> = { float32: 'F32', float16: 'F16', bfloat16: 'BF16', int64: 'I64', int32: 'I32', bool: 'BOOL', uint8: 'U8', uint32: 'U32' };

function encodeValues(data: Float32Array, dtype: 'float32' | 'float16' | 'bfloat16'): Buffer {
  if (dtype === 'float32') return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const out = Buffer.alloc(data.length * 2);
  const conv = dtype === 'bfloat16' ? f32ToBf16 : f32ToF16;
  for (let i = 0; i < data.length; i++) out.writeUInt16LE(conv(data[i]!), i * 2);
  return out;
}

/** Write tensors (given as float32) to one safetensors file, stored as `dtype`. */
export function writeSafetensors(
  file: string,
  tensors: Map<string, TensorData>,
  dtype: 'float32' | 'float16' | 'bfloat16' = 'float32',
): void {
  const header: Record<string, unknown> = { __metadata__: { format: 'pt' } };
  const blobs: Buffer[] = [];
  let offset = 0;
  for (const [name, t] of tensors) {
    const blob = encodeValues(t.data, dtype);
    header[name] = { dtype: CODES[dtype], shape: t.shape, data_offsets: [offset, offset + blob.length] };
    blobs.push(blob);
    offset += blob.length;
  }
  let headerJson = JSON.stringify(header);
  headerJson += ' '.repeat((8 - (headerJson.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(Buffer.byteLength(headerJson)));
  fs.writeFileSync(file, Buffer.concat([len, Buffer.from(headerJson), ...blobs]));
}

/** Split tensors over `shards` files with a `model.safetensors.index.json`, as HF does. */
export function writeShardedSafetensors(
  dir: string,
  tensors: Map<string, TensorData>,
  shards: number,
  dtype: 'float32' | 'float16' | 'bfloat16' = 'float32',
): void {
  const names = [...tensors.keys()];
  const perShard = Math.ceil(names.length / shards);
  const weightMap: Record<string, string> = {};
  for (let s = 0; s < shards; s++) {
    const file = `model-${String(s + 1).padStart(5, '0')}-of-${String(shards).padStart(5, '0')}.safetensors`;
    const part = new Map(names.slice(s * perShard, (s + 1) * perShard).map((n) => [n, tensors.get(n)!] as const));
    for (const n of part.keys()) weightMap[n] = file;
    writeSafetensors(path.join(dir, file), part, dtype);
  }
  fs.writeFileSync(path.join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: weightMap }, null, 2));
}
