// The weights files of a loaded model, as the running server sees them: the private copy of
// the weights a session would otherwise read from them for its life (graph/held-weights.ts),
// what of them the process still maps, and whether a file changed on disk since the load.
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { HeldWeights } from '../graph/held-weights.js';
import { CheckpointError } from '../common/errors.js';

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

export function writeHeldWeights(dir: string, held: HeldWeights): void {
  let out: number;
  try {
    out = fs.openSync(held.file, 'wx', 0o600);
  } catch (e) {
    throw new CheckpointError(
      `cannot write ${held.file}, the private copy of the ${held.bytes} bytes of weights a session would otherwise read from the checkpoint's files for its life (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}): set TMPDIR to a writable folder`,
    );
  }
  const chunk = Buffer.allocUnsafe(Math.min(2 ** 20, Math.max(1, ...held.pieces.map((p) => p.length))));
  try {
    for (const location of new Set(held.pieces.map((p) => p.location))) {
      const file = path.join(dir, location);
      const fd = fs.openSync(file, 'r');
      try {
        for (const p of held.pieces.filter((piece) => piece.location === location)) {
          for (let done = 0; done < p.length;) {
            const n = fs.readSync(fd, chunk, 0, Math.min(chunk.length, p.length - done), p.offset + done);
            if (n === 0)
              throw new CheckpointError(
                `${file}: ends at byte ${p.offset + done}, inside a weight stored at bytes [${p.offset}, ${p.offset + p.length}): the file was cut short`,
              );
            // A stretch of zeros is left a hole (the file's length is set at the end): a
            // checkpoint of zeros — a sparse file of a real model's shape in the tests and
            // benchmarks — costs no disk here either.
            if (!chunk.subarray(0, n).equals(ZEROS.subarray(0, n))) for (let w = 0; w < n; ) w += fs.writeSync(out, chunk, w, n - w, p.at + done + w);
            done += n;
          }
        }
      } finally {
        fs.closeSync(fd);
      }
    }
    fs.ftruncateSync(out, held.bytes);
  } finally {
    fs.closeSync(out);
  }
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
