// Reading the files of a checkpoint folder or a model repository: any failure names the
// file and says what is wrong with it (not a bare parser message). The folder may come
// from an attacker or a broken download, so a file is read only if it is a regular file
// (a FIFO would block the load forever, /dev/zero would fill the heap, a directory gives
// a bare EISDIR), no larger than a cap for its kind, and, for a checkpoint, inside the
// folder (or, for a Hugging Face cache snapshot, its repository's blobs/).
import fs from 'node:fs';
import path from 'node:path';
import { CheckpointError, type CtxprobeError } from '../common/errors.js';

type ErrorClass = new (message: string) => CtxprobeError;

const MiB = 1024 * 1024;

/** Largest size of each kind of file, well above real ones: config.json and
 * tokenizer_config.json are kilobytes (a long chat template and a large
 * added_tokens_decoder stay under 1 MiB); tokenizer.json is Gemma's 33 MB at most
 * (262144 tokens); a sharded index lists one line per tensor (DeepSeek-V3's 91k tensors:
 * about 9 MB). Anything larger is not a checkpoint file, and reading it would only cost
 * memory. */
export const FILE_CAPS = {
  json: 8 * MiB,
  tokenizerJson: 256 * MiB,
  shardIndex: 64 * MiB,
  chatTemplate: 8 * MiB,
  /** A GGUF file's header (metadata and tensor infos, not the weights): a 262144-token
   * vocabulary with scores, types and merges takes about 20 MB. */
  ggufHeader: 256 * MiB,
} as const;

/** What a non-regular file is, in words. */
function kindOf(st: fs.Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO (named pipe)';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isSocket()) return 'a socket';
  return 'not a regular file';
}

const codeOf = (e: unknown) => (e as NodeJS.ErrnoException).code ?? (e as Error).message;

/** An open descriptor of `file` and its size, refused unless it is a regular file. The
 * type is read before opening (opening a FIFO for reading waits for a writer) and again
 * on the descriptor (the path may have been swapped in between); O_NONBLOCK keeps even
 * that open from waiting. The caller closes it. */
export function openRegularFile(file: string, Err: ErrorClass = CheckpointError): { fd: number; size: number } {
  let st: fs.Stats;
  try {
    st = fs.statSync(file);
  } catch (e) {
    throw new Err(`${file}: cannot read it (${codeOf(e)})`);
  }
  if (!st.isFile()) throw new Err(`${file}: is ${kindOf(st)}, not a regular file`);
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  } catch (e) {
    throw new Err(`${file}: cannot read it (${codeOf(e)})`);
  }
  const now = fs.fstatSync(fd);
  if (!now.isFile()) {
    fs.closeSync(fd);
    throw new Err(`${file}: is ${kindOf(now)}, not a regular file`);
  }
  return { fd, size: now.size };
}

/** The bytes of a regular file of at most `maxBytes`; reading stops there even if the
 * file grows while it is read. */
export function readBounded(file: string, maxBytes: number, Err: ErrorClass = CheckpointError): Buffer {
  const { fd, size } = openRegularFile(file, Err);
  try {
    const tooLarge = (n: number | string) => new Err(`${file}: is ${n} bytes, more than the ${maxBytes} such a file may have`);
    if (size > maxBytes) throw tooLarge(size);
    const buf = Buffer.allocUnsafe(Math.min(size, maxBytes) + 1);
    let got = 0;
    for (let n; got < buf.length && (n = fs.readSync(fd, buf, got, buf.length - got, got)) > 0;) got += n;
    if (got > maxBytes) throw tooLarge(`over ${maxBytes}`);
    return buf.subarray(0, got);
  } catch (e) {
    if ((e as CtxprobeError).kind) throw e;
    throw new Err(`${file}: cannot read it (${codeOf(e)})`);
  } finally {
    fs.closeSync(fd);
  }
}

/** The JSON object in `file`; `Err` is the error to throw (checkpoint or setting). A
 * refusal names where the JSON breaks, never what the file holds there: a checkpoint's file
 * may link anywhere on the host. */
export function readJsonObject(file: string, Err: ErrorClass = CheckpointError, maxBytes: number = FILE_CAPS.json): Record<string, any> {
  const text = readBounded(file, maxBytes, Err).toString('utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new Err(`${file}: not valid JSON (${jsonFault(text, (e as Error).message)})`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Err(`${file}: a JSON object is required`);
  return value as Record<string, any>;
}

/** Where a checkpoint's files may lead: anywhere their symlinks go (`follow`, as
 * transformers and vLLM read a `--local-dir` download, a DVC folder or a variant that links
 * most files to another folder), or only inside the folder (`contain`; a Hugging Face cache
 * snapshot's `blobs/` counts as inside). Either way only regular files are read, and no
 * byte of a file's content reaches a message. */
export const CHECKPOINT_LINKS = ['follow', 'contain'] as const;
export type CheckpointLinks = (typeof CHECKPOINT_LINKS)[number];

/** Where a JSON text breaks, in words: V8's message with any quoted snippet of the text left
 * out, and the position (found by bisection where V8 does not give it). */
function jsonFault(text: string, message: string): string {
  const positioned = /^(.*?)(?: in JSON)? at position (\d+)/s.exec(message);
  if (positioned) return `${positioned[1]} at position ${positioned[2]}`;
  // "Unexpected token 'x', "…the text…" is not valid JSON": the token and snippet are the file's.
  const kind = /^Unexpected token/.test(message) ? 'Unexpected character' : 'Unexpected input';
  return `${kind} at position ${firstBadPosition(text)}`;
}

/** The first position where a prefix of `text` stops being a possible start of JSON: the
 * shortest prefix whose parse fails other than at its end. Only on a refusal. */
function firstBadPosition(text: string): number {
  const failsBefore = (n: number) => {
    try {
      JSON.parse(text.slice(0, n));
      return false;
    } catch (e) {
      const m = (e as Error).message;
      if (m.startsWith('Unexpected end of JSON input')) return false;
      const at = /at position (\d+)/.exec(m);
      return !at || Number(at[1]) < n;
    }
  };
  let [lo, hi] = [0, text.length];
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (failsBefore(mid + 1)) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/** `name` inside checkpoint folder `dir`: never a path that climbs out of it, and with
 * `contain` refused if what its symlinks lead to lies outside it. Returns the path (for
 * messages); absent files are left to the reader to report. */
export function checkpointFile(dir: string, name: string, links: CheckpointLinks = 'follow'): string {
  const file = path.join(dir, name);
  const rel = path.relative(dir, file);
  if (rel.startsWith('..') || path.isAbsolute(rel)) throw new CheckpointError(`${dir}: ${name} lies outside the checkpoint folder`);
  if (links === 'follow') return file;
  let real: string;
  try {
    real = fs.realpathSync(file);
  } catch {
    return file;
  }
  const roots = allowedRoots(dir);
  if (!roots.some((root) => real === root || real.startsWith(root + path.sep)))
    throw new CheckpointError(`${file}: leads to ${real}, outside the checkpoint folder (checkpointLinks contain)`);
  return file;
}

function allowedRoots(dir: string): string[] {
  const real = fs.realpathSync(dir);
  const roots = [real];
  if (path.basename(path.dirname(real)) === 'snapshots') {
    const blobs = path.join(path.dirname(path.dirname(real)), 'blobs');
    if (fs.existsSync(blobs)) roots.push(fs.realpathSync(blobs));
  }
  return roots;
}
