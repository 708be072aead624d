// The weights files of a loaded model, as the running server sees them: the private copy of
// the weights a session would otherwise read from them for its life (graph/held-weights.ts),
// what of them the process still maps, and whether a file changed on disk since the load.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { HeldWeights } from '../graph/held-weights.js';
import { CheckpointError } from '../common/errors.js';
import { quantTypeOf, repackRows } from './ggml-blocks.js';
import { repackHf } from './hf-quantized.js';
import { quantizeRows } from './ggml-quantize.js';
import { widenHalves } from '../common/floats.js';

/** Float rows of `dtype` as float32 values. */
function floatsOf(bytes: Uint8Array, dtype: 'float32' | 'float16' | 'bfloat16'): Float32Array {
  if (dtype === 'float32') return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  return widenHalves(new Uint16Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength)), dtype);
}

/** A fresh name for a model's private copy of its held weights, in the temporary folder
 * (TMPDIR), by its real path (onnxruntime refuses a path through a symlink that leaves the
 * folder it resolves against). */
export function heldWeightsPath(): string {
  return path.join(fs.realpathSync(os.tmpdir()), `ctxprobe-held-weights-${process.pid}-${randomUUID().slice(0, 8)}.bin`);
}

/** Copy the held weights from the checkpoint's files in `dir` to their private copy (a new
 * file, only the owner may read it) with plain reads: a file cut short is a CheckpointError
 * naming it now, never a fault at a later pass. */
const ZEROS = Buffer.alloc(2 ** 20);

/** Bytes of the checkpoint a write of `held` reads: each plain piece, and each group of
 * parts derived from the same bytes once (its progress measure). */
export function heldSourceBytes(held: HeldWeights): number {
  const derived = new Set(held.pieces.filter((p) => p.derived).map((p) => `${p.location}:${p.offset}:${p.length}`));
  const plain = held.pieces.filter((p) => !p.derived).reduce((n, p) => n + p.length, 0);
  return plain + [...derived].reduce((n, key) => n + Number(key.split(':').at(-1)), 0);
}

/** Make the held weights' private copy (a new file, only the owner may read it): the plain
 * pieces copied, the derived ones made. `progress(done, total)`: checkpoint bytes read so
 * far, of heldSourceBytes. With `parts` > 1, `writer(k)` runs part k of them each
 * (writeHeldPart in a thread of its own: repacking is the load's longest step, and each
 * tensor's parts are its own bytes). */
export async function writeHeldWeights(
  dir: string,
  held: HeldWeights,
  progress: (done: number, total: number) => void = () => {},
  parts = 1,
  writer: (part: number, advance: (bytes: number) => void) => Promise<void> = async () => {},
): Promise<void> {
  const total = heldSourceBytes(held);
  let read = 0;
  const advance = (n: number) => progress((read += n), total);
  let out: number;
  try {
    out = fs.openSync(held.file, 'wx', 0o600);
  } catch (e) {
    throw new CheckpointError(
      `cannot write ${held.file}, the private copy of the ${held.bytes} bytes of weights a session would otherwise read from the checkpoint's files for its life (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}): set TMPDIR to a writable folder`,
    );
  }
  try {
    if (parts === 1) writeHeldPart(dir, held, 0, 1, advance, out);
    else {
      // Every part in a writer of its own: this thread hears their progress as it goes.
      const done = await Promise.allSettled(Array.from({ length: parts }, (_, k) => writer(k, advance)));
      const failed = done.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
    }
    fs.ftruncateSync(out, held.bytes);
  } finally {
    fs.closeSync(out);
  }
}

/** Writer `part` of `parts` of a held copy whose file exists: the first copies the plain
 * pieces, each makes the derived tensors dealt to it (every `parts`-th of them, largest
 * first). A file cut short is a CheckpointError naming it now, never a fault at a later pass. */
export function writeHeldPart(
  dir: string,
  held: HeldWeights,
  part: number,
  parts: number,
  advance: (bytes: number) => void,
  out?: number,
): void {
  const own = out === undefined;
  const fdOut = own ? fs.openSync(held.file, 'r+') : out;
  const chunk = Buffer.allocUnsafe(Math.min(2 ** 20, Math.max(1, ...held.pieces.map((p) => p.length))));
  try {
    for (const location of new Set(held.pieces.map((p) => p.location))) {
      const file = path.join(dir, location);
      const fd = fs.openSync(file, 'r');
      try {
        const pieces = held.pieces.filter((piece) => piece.location === location);
        for (const p of part === 0 ? pieces.filter((piece) => !piece.derived) : []) {
          for (let done = 0; done < p.length;) {
            const n = readAt(fd, file, chunk, Math.min(chunk.length, p.length - done), p.offset + done, p);
            writeNonZero(fdOut, chunk.subarray(0, n), p.at + done);
            done += n;
            advance(n);
          }
        }
        // Tensors derived from the same bytes (the parts of one quantized tensor) in one read.
        const groups = new Map<string, HeldPiece[]>();
        for (const p of pieces.filter((piece) => piece.derived)) {
          const key = `${p.offset}:${p.length}:${p.derived!.rowOrder ? 'ordered' : ''}`;
          groups.set(key, [...(groups.get(key) ?? []), p]);
        }
        const dealt = [...groups.values()].sort((x, y) => y[0]!.length - x[0]!.length).filter((_, k) => k % parts === part);
        for (const group of dealt) writeDerived(fd, file, fdOut, group, advance);
      } finally {
        fs.closeSync(fd);
      }
    }
  } finally {
    if (own) fs.closeSync(fdOut);
  }
}

type HeldPiece = HeldWeights['pieces'][number];

/** Run `body` with the private copy present as zeros of its size (a sparse file: no disk),
 * then gone: onnxruntime checks every external file exists when it makes a session, and the
 * placement check (engine/placements.ts) makes one only to read where nodes run. */
export async function withHeldPlaceholder<T>(held: HeldWeights | undefined, body: () => Promise<T>): Promise<T> {
  // A copy the weights cache holds is there already.
  if (!held || held.cache === 'reuse') return body();
  const fd = fs.openSync(held.file, 'wx', 0o600);
  try {
    fs.ftruncateSync(fd, held.bytes);
  } finally {
    fs.closeSync(fd);
  }
  try {
    return await body();
  } finally {
    fs.rmSync(held.file, { force: true });
  }
}

/** `n` bytes of `file` at `offset` into `into` (a short file is a CheckpointError naming the weight). */
function readAt(fd: number, file: string, into: Buffer, n: number, offset: number, p: HeldPiece): number {
  let got = 0;
  while (got < n) {
    const r = fs.readSync(fd, into, got, n - got, offset + got);
    if (r === 0)
      throw new CheckpointError(
        `${file}: ends at byte ${offset + got}, inside a weight stored at bytes [${p.offset}, ${p.offset + p.length}): the file was cut short`,
      );
    got += r;
  }
  return got;
}

// A stretch of zeros is left a hole (the file's length is set at the end): a checkpoint of
// zeros — a sparse file of a real model's shape in the tests and benchmarks — costs no disk
// here either.
function writeNonZero(out: number, bytes: Uint8Array, at: number): void {
  for (let start = 0; start < bytes.length; start += ZEROS.length) {
    const piece = bytes.subarray(start, Math.min(bytes.length, start + ZEROS.length));
    if (ZEROS.subarray(0, piece.length).equals(piece)) continue;
    for (let w = 0; w < piece.length;) w += fs.writeSync(out, piece, w, piece.length - w, at + start + w);
  }
}

/** The parts of one quantized tensor (ggml-blocks.ts), from its block rows read in runs of
 * about 4 MiB (whole, when its rows are taken in another order). */
function writeDerived(fd: number, file: string, out: number, group: HeldPiece[], advance: (bytes: number) => void): void {
  const first = group[0]!;
  const d = first.derived!;
  if (d.hf) {
    writeHfDerived(fd, file, out, group);
    return advance(first.length);
  }
  const type = quantTypeOf(d.ggmlType)!;
  const rowBytes = first.length / d.rows;
  const run = d.rowOrder ? d.rows : Math.max(1, Math.floor(2 ** 22 / rowBytes));
  const src = Buffer.allocUnsafe(run * rowBytes);
  const ordered = d.rowOrder ? Buffer.allocUnsafe(src.length) : undefined;
  for (let r0 = 0; r0 < d.rows; r0 += run) {
    const n = Math.min(run, d.rows - r0);
    readAt(fd, file, src, n * rowBytes, first.offset + r0 * rowBytes, first);
    let rows: Uint8Array = src.subarray(0, n * rowBytes);
    if (ordered) {
      d.rowOrder!.forEach((from, r) => src.copy(ordered, r * rowBytes, from * rowBytes, (from + 1) * rowBytes));
      rows = ordered;
    }
    if (d.from) rows = quantizeRows(type, floatsOf(rows, d.from), n, d.cols);
    const { parts, nonFinite } = repackRows(
      type,
      rows,
      n,
      d.cols,
      group.some((p) => p.derived!.part === 'wide'),
    );
    if (nonFinite !== undefined)
      throw new CheckpointError(
        `${file}: tensor ${d.tensor} has a non-finite scale or min in block row ${r0 + nonFinite}: the model would compute NaN`,
      );
    for (const p of group) {
      const part = parts[p.derived!.part]!;
      writeNonZero(out, part, p.at + (r0 * part.length) / n);
    }
    advance(n * rowBytes);
  }
}

/** The parts of one GPTQ / AWQ weight (hf-quantized.ts), from its qweight, qzeros and scales
 * read whole (a linear's are tens of MB at most). */
function writeHfDerived(fd: number, file: string, out: number, group: HeldPiece[]): void {
  const first = group[0]!;
  const d = first.derived!;
  const h = d.hf!;
  const read = (offset: number, length: number) => {
    const b = Buffer.allocUnsafe(length);
    readAt(fd, file, b, length, offset, { ...first, offset, length });
    return b;
  };
  const { parts, nonFinite } = repackHf(h, d.rows, d.cols, {
    qweight: read(first.offset, first.length),
    qzeros: read(h.qzeros.offset, h.qzeros.length),
    scales: read(h.scales.offset, h.scales.length),
  });
  if (nonFinite !== undefined)
    throw new CheckpointError(
      `${file}: tensor ${d.tensor.replace(/qweight$/, 'scales')} has a non-finite scale for output row ${nonFinite}: the model would compute NaN`,
    );
  for (const p of group) writeNonZero(out, parts[p.derived!.part]!, p.at);
}

/** Which of `files` this process has memory-mapped now (Linux: /proc/self/maps); undefined
 * where that cannot be told. */
export function mappedFiles(files: readonly string[]): string[] | undefined {
  let maps: string;
  try {
    maps = fs.readFileSync('/proc/self/maps', 'utf8');
  } catch {
    return undefined;
  }
  const mapped = new Set(maps.split('\n').map((line) => line.slice(line.indexOf('/')).replace(/ \(deleted\)$/, '')));
  return files.filter((f) => mapped.has(f));
}

/** What identifies a file's contents cheaply: device, inode, size, modification time. */
interface FileIdentity {
  dev: number;
  ino: number;
  size: number;
  mtimeMs: number;
}

const identity = (file: string): FileIdentity | undefined => {
  try {
    const { dev, ino, size, mtimeMs } = fs.statSync(file);
    return { dev, ino, size, mtimeMs };
  } catch {
    return undefined;
  }
};

/** The weights files of a model as they were at load, checked against the disk on demand. */
export class WeightFiles {
  private readonly loaded: Map<string, FileIdentity>;
  private changedFile?: { file: string; change: string };

  /** `files`: absolute paths, as the session reads them. */
  constructor(readonly files: readonly string[]) {
    this.loaded = new Map(files.map((f) => [f, identity(f) ?? { dev: 0, ino: 0, size: -1, mtimeMs: 0 }]));
  }

  /** The first file found changed since the load and how (sticky: once changed, always), or
   * undefined while every file is as it was. One stat per file. */
  changed(): { file: string; change: string } | undefined {
    if (this.changedFile) return this.changedFile;
    for (const [file, was] of this.loaded) {
      const now = identity(file);
      const change = describeChange(was, now);
      if (change) return (this.changedFile = { file, change });
    }
    return undefined;
  }
}

function describeChange(was: FileIdentity, now: FileIdentity | undefined): string | undefined {
  if (!now) return 'removed';
  if (now.dev !== was.dev || now.ino !== was.ino) return 'replaced by another file';
  if (now.size !== was.size) return `${now.size < was.size ? 'truncated' : 'grown'} from ${was.size} to ${now.size} bytes`;
  if (now.mtimeMs !== was.mtimeMs) return `rewritten in place (modified ${new Date(now.mtimeMs).toISOString()})`;
  return undefined;
}
