// The weights cache: a model's private copy of its held weights (graph/held-weights.ts —
// quantized blocks repacked into their exact form, matrices quantized at load, the weights
// a session would otherwise keep mapped) kept between starts, so that a restart maps it
// instead of making it again. Making it is most of a quantized model's load (an 8B Q4_K_M
// GGUF: 34 s of its 68 here, in JavaScript on the session thread); llama.cpp maps its file.
//
// An entry is `<key>.held` and its record `<key>.json`, in a folder only the server's user
// may write (0700; a folder others can write is not used). It is used only when everything
// it was made from is as it was — the record names each source file's identity (device,
// inode, size, modification time) and the layout of every piece the copy holds — and the
// copy itself is as the server wrote it (its inode, size, modification and change times):
// any change, by any means short of resetting the clock, makes it stale, and it is made
// again. A new entry is written beside its final name and renamed into it when complete; the
// record is written last, once the model has loaded from it.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { HeldWeights } from '../graph/held-weights.js';

/** Bumped whenever the held copy's bytes change for the same pieces (a repack's layout). */
const FORMAT = 1;

/** Below this many derived bytes (repacked or quantized) a copy is cheap to make: not cached
 * (CTXPROBE_WEIGHTS_CACHE_MIN_BYTES; tests lower it). */
const minBytes = () => Number(process.env.CTXPROBE_WEIGHTS_CACHE_MIN_BYTES ?? 64 * 2 ** 20);

/** `--weights-cache`'s default: the user's cache folder. */
export function defaultWeightsCache(): string {
  return path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'ctxprobe', 'weights');
}

interface Identity {
  dev: number;
  ino: number;
  size: number;
  mtimeMs: number;
}
const identityOf = (st: fs.Stats): Identity => ({ dev: st.dev, ino: st.ino, size: st.size, mtimeMs: st.mtimeMs });
const same = (a: object | undefined, b: object | undefined) =>
  a !== undefined && b !== undefined && JSON.stringify(a) === JSON.stringify(b);

/** What an entry's record says of it. */
interface Record {
  format: number;
  /** The model it was made for (an older entry of the same model is removed when a new one is made). */
  model: string;
  sources: { [file: string]: Identity };
  pieces: string;
  held: Identity & { ctimeMs: number };
}

/** How a load uses the cache: `reuse` the entry at `file`, or `fill` it (then `commit`). */
export type HeldCacheUse =
  { kind: 'reuse'; file: string } | { kind: 'fill'; file: string; commit(): void } | { kind: 'off'; reason: string };

/** The held copy's name in the cache for `model` and its source files (the key: what the
 * graph is built from), or why none is used. Called before the graph is built: the file's
 * name is in the graph. */
export function heldCachePath(
  dir: string | undefined,
  model: string,
  sources: readonly string[],
  key: object,
): { file: string } | { off: string } {
  if (!dir) return { off: 'off (--weights-cache off)' };
  try {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    const st = fs.statSync(dir);
    if (!st.isDirectory()) return { off: `${dir} is not a folder` };
    if ((st.mode & 0o022) !== 0 || (typeof process.getuid === 'function' && st.uid !== process.getuid()))
      return { off: `${dir} may be written by other users: not used (make it 0700, owned by the server's user)` };
  } catch (e) {
    return { off: `${dir} cannot be used (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})` };
  }
  const hash = crypto
    .createHash('sha256')
    .update(
      JSON.stringify({ format: FORMAT, model: path.resolve(model), sources: sources.map((f) => [f, identityOf(fs.statSync(f))]), key }),
    )
    .digest('hex')
    .slice(0, 32);
  return { file: path.join(fs.realpathSync(dir), `${hash}.held`) };
}

/** Whether the entry at `file` holds exactly `held`, made from `sources` as they are now:
 * `reuse` it; else make it (`fill`, its record written by `commit` once the model loaded
 * from it). Copies with few derived bytes are not cached. */
export function useHeldCache(file: string, model: string, held: HeldWeights, sources: readonly string[]): HeldCacheUse {
  const derived = held.pieces.reduce((n, p) => n + (p.derived?.bytes ?? 0), 0);
  if (derived < minBytes())
    return { kind: 'off', reason: `not cached: ${derived} bytes repacked or quantized at load, under ${minBytes()}` };
  const pieces = crypto.createHash('sha256').update(JSON.stringify(held.pieces)).digest('hex');
  const recordFile = file.replace(/\.held$/, '.json');
  const current = (): Record['sources'] => Object.fromEntries(sources.map((f) => [f, identityOf(fs.statSync(f))]));
  try {
    const record = JSON.parse(fs.readFileSync(recordFile, 'utf8')) as Record;
    const st = fs.statSync(file);
    if (
      record.format === FORMAT &&
      record.pieces === pieces &&
      same(record.sources, current()) &&
      same(record.held, { ...identityOf(st), ctimeMs: st.ctimeMs }) &&
      st.size === held.bytes
    )
      return { kind: 'reuse', file };
  } catch {
    /* no entry, or not one to trust: made again */
  }
  fs.rmSync(recordFile, { force: true });
  fs.rmSync(file, { force: true });
  return {
    kind: 'fill',
    file,
    commit: () => {
      const st = fs.statSync(file);
      const record: Record = {
        format: FORMAT,
        model: path.resolve(model),
        sources: current(),
        pieces,
        held: { ...identityOf(st), ctimeMs: st.ctimeMs },
      };
      removeOlderEntries(path.dirname(file), record.model, file);
      fs.writeFileSync(recordFile, JSON.stringify(record, null, 1), { mode: 0o600 });
    },
  };
}

/** The entries of `model` other than `keep`: a model's older copies, made stale by a change. */
function removeOlderEntries(dir: string, model: string, keep: string): void {
  for (const f of fs.readdirSync(dir).filter((n) => n.endsWith('.json'))) {
    const held = path.join(dir, f.replace(/\.json$/, '.held'));
    if (held === keep) continue;
    try {
      if ((JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) as Record).model !== model) continue;
    } catch {
      continue;
    }
    fs.rmSync(path.join(dir, f), { force: true });
    fs.rmSync(held, { force: true });
  }
}

/** How a load uses the cache, once its graph says what the copy holds: marks `held` (the
 * session thread reads the mark) and says what to do. */
export function cacheUse(
  cached: { file: string } | { off: string },
  model: string,
  held: HeldWeights | undefined,
  sources: readonly string[],
): HeldCacheUse {
  if ('off' in cached) return { kind: 'off', reason: cached.off };
  if (!held) return { kind: 'off', reason: 'nothing held' };
  const use = useHeldCache(cached.file, model, held, sources);
  if (use.kind !== 'off') held.cache = use.kind;
  return use;
}
