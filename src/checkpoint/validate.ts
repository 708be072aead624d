// Checks of a checkpoint's weight files that hold whatever their format (safetensors
// today; a GGUF reader would give the same tensor list): each tensor's bytes lie inside
// its file and overlap no other's, and no weight holds a NaN or an infinity, which would
// otherwise be served as NaN scores from a model that reports SERVING.
import fs from 'node:fs';
import path from 'node:path';
import { CheckpointError } from '../common/errors.js';
import type { DTypeName } from '../common/dtypes.js';

/** Refuse byte ranges (relative to a file's data section of `dataBytes`) that run past
 * it or overlap, naming the tensors. Empty tensors may sit anywhere. */
export function checkTensorRanges(file: string, ranges: { name: string; begin: number; end: number }[], dataBytes: number): void {
  for (const r of ranges)
    if (r.end > dataBytes)
      throw new CheckpointError(`${file}: tensor ${r.name}: data ends at byte ${r.end} of ${dataBytes}: the file is truncated`);
  const filled = ranges.filter((r) => r.end > r.begin).sort((a, b) => a.begin - b.begin);
  for (let i = 1; i < filled.length; i++) {
    const [prev, cur] = [filled[i - 1]!, filled[i]!];
    if (cur.begin < prev.end)
      throw new CheckpointError(
        `${file}: tensors ${prev.name} (bytes ${prev.begin}–${prev.end}) and ${cur.name} (bytes ${cur.begin}–${cur.end}) overlap`,
      );
  }
}

/** A tensor's bytes in a weight file, as the scan reads them. */
export interface TensorBytes {
  name: string;
  dtype: DTypeName;
  /** The file's real folder and name, and the tensor's byte range in it. */
  dir: string;
  location: string;
  offset: number;
  length: number;
  /** The path the checkpoint names, for messages. */
  file: string;
}

/** Bytes read at a time: two buffers of this, whatever the checkpoint's size. */
const CHUNK = 16 * 1024 * 1024;

/** Refuse the first weight that holds a NaN or ±infinity, naming it and the element's
 * index. Every tensor is read once, file by file in offset order, 16 MiB at a time into
 * two reused buffers (the next read runs while the last is scanned, and the event loop
 * stays free between chunks: health is answered and signals handled during a long scan),
 * so the scan holds 32 MiB of buffers whatever the checkpoint's size. The scan tests the
 * exponent bits of 32-bit words, two halves at a time for F16/BF16. Measured
 * (bench/weight-scan.ts, 1 GiB per dtype from the page cache, this shared 2-core machine
 * at load ~10): about 2 GB per CPU second for F32, F16 and BF16 alike, the copy out of
 * the page cache included; 0.6–1.0 GB/s wall under that load. The loop alone: 4.5 GB/s
 * over memory. */
export async function findNonFinite(
  tensors: Iterable<TensorBytes>,
  progress: (done: number, total: number) => void = () => {},
): Promise<void> {
  const byFile = new Map<string, TensorBytes[]>();
  let total = 0;
  let scanned = 0;
  for (const t of tensors) {
    total += t.length;
    const key = path.join(t.dir, t.location);
    const list = byFile.get(key);
    if (list) list.push(t);
    else byFile.set(key, [t]);
  }
  const buffers = [Buffer.allocUnsafeSlow(CHUNK), Buffer.allocUnsafeSlow(CHUNK)];
  for (const [real, list] of byFile) {
    const pieces = list
      .sort((a, b) => a.offset - b.offset)
      .flatMap((t) =>
        Array.from({ length: Math.ceil(t.length / CHUNK) }, (_, k) => ({ t, at: k * CHUNK, n: Math.min(CHUNK, t.length - k * CHUNK) })),
      );
    const handle = await fs.promises.open(real, 'r');
    try {
      const read = (i: number) => {
        const p = pieces[i]!;
        return handle.read(buffers[i % 2]!, 0, p.n, p.t.offset + p.at);
      };
      let next = pieces.length > 0 ? read(0) : undefined;
      for (let i = 0; i < pieces.length; i++) {
        const { bytesRead } = await next!.catch((e: NodeJS.ErrnoException) => {
          throw new CheckpointError(`${pieces[i]!.t.file}: cannot read it (${e.code ?? e.message})`);
        });
        next = i + 1 < pieces.length ? read(i + 1) : undefined;
        const p = pieces[i]!;
        if (bytesRead !== p.n) {
          await next?.catch(() => undefined);
          throw new CheckpointError(`${p.t.file}: tensor ${p.t.name}: the file ended while its data was read`);
        }
        const bad = firstNonFinite(buffers[i % 2]!, p.n, p.t.dtype);
        progress((scanned += p.n), total);
        if (bad >= 0) {
          await next?.catch(() => undefined);
          const element = p.at / (p.t.dtype === 'float32' ? 4 : 2) + bad;
          throw new CheckpointError(`${p.t.file}: tensor ${p.t.name} holds a NaN or infinity at element ${element} (flat index)`);
        }
      }
    } finally {
      await handle.close();
    }
  }
}

/** Index of the first non-finite element among the first `bytes` bytes of `buf` (which
 * starts a tensor's element), or -1. Words are read in the host's byte order: little-endian
 * wherever onnxruntime-node ships (x64, arm64), as the files are. */
function firstNonFinite(buf: Buffer, bytes: number, dtype: DTypeName): number {
  const words = new Int32Array(buf.buffer, buf.byteOffset, bytes >> 2);
  if (dtype === 'float32') return allFinite(words, 0x3fc00000, 0x00400000, 0x40000000) ? -1 : slowFind(buf, bytes, dtype);
  // F16: exponent bits 10–14 of each half; BF16: bits 7–14.
  const [mask, one, carry] = dtype === 'float16' ? [0x3e003e00, 0x02000200, 0x40004000] : [0x3fc03fc0, 0x00400040, 0x40004000];
  const tailBad = bytes % 4 !== 0 && !finiteHalf(buf.readUInt16LE(bytes - 2), dtype);
  return allFinite(words, mask, one, carry) && !tailBad ? -1 : slowFind(buf, bytes, dtype);
}

/** Whether no word has an all-ones exponent: `(w >> 1) & mask` holds each exponent one
 * bit lower, and adding one to it carries into `carry` only when every exponent bit is
 * set (int32 arithmetic throughout: no value leaves V8's small integers). Four
 * accumulators, no branch: 4.5 GB/s where a compare-and-branch loop ran 3.9. */
function allFinite(w: Int32Array, mask: number, one: number, carry: number): boolean {
  let [a, b, c, d] = [0, 0, 0, 0];
  const n = w.length;
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    a |= ((w[i]! >> 1) & mask) + one;
    b |= ((w[i + 1]! >> 1) & mask) + one;
    c |= ((w[i + 2]! >> 1) & mask) + one;
    d |= ((w[i + 3]! >> 1) & mask) + one;
  }
  for (; i < n; i++) a |= ((w[i]! >> 1) & mask) + one;
  return ((a | b | c | d) & carry) === 0;
}

function finiteHalf(h: number, dtype: DTypeName): boolean {
  return dtype === 'float16' ? (h & 0x7c00) !== 0x7c00 : (h & 0x7f80) !== 0x7f80;
}

/** The element the fast test found, looked for one by one (only on a refusal). */
function slowFind(buf: Buffer, bytes: number, dtype: DTypeName): number {
  if (dtype === 'float32') {
    for (let i = 0; i + 4 <= bytes; i += 4) if ((buf.readUInt32LE(i) & 0x7f800000) === 0x7f800000) return i / 4;
  } else {
    for (let i = 0; i + 2 <= bytes; i += 2) if (!finiteHalf(buf.readUInt16LE(i), dtype)) return i / 2;
  }
  return -1;
}
