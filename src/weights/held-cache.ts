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

/** How a load uses the cache: `reuse` the entry at `file`, or `fill` it (then `commit`, or
 * `drop` this load's copy where the load failed). */
export type HeldCacheUse =
  { kind: 'reuse'; file: string } | { kind: 'fill'; file: string; commit(): void; drop(): void } | { kind: 'off'; reason: string };

/** Where a load's held copy goes, chosen before the graph is built (the file's name is in
 * the graph): the cache's entry `final` itself where its record says it may be reused
 * (`file` === `final`), else a name of this load's own beside it (`<key>.<pid>-<random>.partial`),
 * renamed into `final` once the model has loaded from it. Two servers filling the same entry
 * at once (two replicas on one host, a test's parallel starts) each write their own file; the
 * last rename wins, and both are the same bytes. */
export type HeldCachePath = { off: string } | { file: string; final: string };

/** The held copy's name in the cache for `model` and its source files (the key: what the
 * graph is built from), or why none is used. */
export function heldCachePath(dir: string | undefined, model: string, sources: readonly string[], key: object): HeldCachePath {
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
  const final = path.join(fs.realpathSync(dir), `${hash}.held`);
  return { file: trusted(final, sources) ? final : partialName(final), final };
}

/** A name of this load's own beside `final`. */
const partialName = (final: string) => final.replace(/\.held$/, `.${process.pid}-${crypto.randomUUID().slice(0, 8)}.partial`);

/** Whether `final`'s record says it is the copy the server wrote, from `sources` as they are
 * now (what the held pieces are is checked once the graph says: useHeldCache). */
function trusted(final: string, sources: readonly string[]): Record | undefined {
  try {
    const record = JSON.parse(fs.readFileSync(recordOf(final), 'utf8')) as Record;
    const st = fs.statSync(final);
    return record.format === FORMAT &&
      same(record.sources, currentSources(sources)) &&
      same(record.held, { ...identityOf(st), ctimeMs: st.ctimeMs })
      ? record
      : undefined;
  } catch {
    return undefined; // no entry, or not one to trust: made again
  }
}

const recordOf = (held: string) => held.replace(/\.held$/, '.json');
const currentSources = (sources: readonly string[]): Record['sources'] =>
  Object.fromEntries(sources.map((f) => [f, identityOf(fs.statSync(f))]));

/** Whether the entry at `final` holds exactly `held`, made from `sources` as they are now:
 * `reuse` it (`held.file` is `final`); else make it (`fill`: `held.file`, this load's own,
 * renamed into `final` by `commit` once the model loaded from it, then its record written).
 * `rebuild`: the graph was built to read `final`, which cannot be reused after all; build it
 * again for `file` (rare: the entry's pieces differ for the same key, a format change).
 * Copies with few derived bytes are not cached. */
export function useHeldCache(
  final: string,
  model: string,
  held: HeldWeights,
  sources: readonly string[],
): HeldCacheUse | { kind: 'rebuild'; file: string } {
  const derived = held.pieces.reduce((n, p) => n + (p.derived?.bytes ?? 0), 0);
  if (derived < minBytes()) {
    if (held.file === final) return { kind: 'rebuild', file: partialName(final) };
    return { kind: 'off', reason: `not cached: ${derived} bytes repacked or quantized at load, under ${minBytes()}` };
  }
  const pieces = crypto.createHash('sha256').update(JSON.stringify(held.pieces)).digest('hex');
  if (held.file === final) {
    const record = trusted(final, sources);
    if (record?.pieces === pieces && fs.statSync(final).size === held.bytes) return { kind: 'reuse', file: final };
    return { kind: 'rebuild', file: partialName(final) };
  }
  const partial = held.file;
  return {
    kind: 'fill',
    file: final,
    commit: () => {
      fs.renameSync(partial, final);
      const st = fs.statSync(final);
      const record: Record = {
        format: FORMAT,
        model: path.resolve(model),
        sources: currentSources(sources),
        pieces,
        held: { ...identityOf(st), ctimeMs: st.ctimeMs },
      };
      const written = `${partial}.json`;
      fs.writeFileSync(written, JSON.stringify(record, null, 1), { mode: 0o600 });
      fs.renameSync(written, recordOf(final));
      removeStaleEntries(path.dirname(final), record);
    },
    drop: () => fs.rmSync(partial, { force: true }),
  };
}

/** The entries of `made`'s model made from its files as they were before (another inode,
 * size or time: stale for good), and partial copies whose process is gone. An entry of the
 * same files with other options (another key) stays: another server may be using it. */
function removeStaleEntries(dir: string, made: Record): void {
  for (const f of fs.readdirSync(dir)) {
    const file = path.join(dir, f);
    const partial = /\.(\d+)-[0-9a-f]{8}\.partial(\.json)?$/.exec(f);
    if (partial) {
      if (!alive(Number(partial[1]))) fs.rmSync(file, { force: true });
      continue;
    }
    if (!f.endsWith('.json')) continue;
    try {
      const record = JSON.parse(fs.readFileSync(file, 'utf8')) as Record;
      if (record.model !== made.model || same(record.sources, made.sources)) continue;
    } catch {
      continue;
    }
    fs.rmSync(file, { force: true });
    fs.rmSync(file.replace(/\.json$/, '.held'), { force: true });
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** How a load uses the cache, once its graph says what the copy holds: marks `held` (the
 * session thread reads the mark) and says what to do (`rebuild`: build the graph again to
 * write `file`, then ask again). */
export function cacheUse(
  cached: HeldCachePath,
  model: string,
  held: HeldWeights | undefined,
  sources: readonly string[],
): HeldCacheUse | { kind: 'rebuild'; file: string } {
  if ('off' in cached) return { kind: 'off', reason: cached.off };
  if (!held) return { kind: 'off', reason: 'nothing held' };
  const use = useHeldCache(cached.final, model, held, sources);
  if (use.kind === 'reuse' || use.kind === 'fill') held.cache = use.kind;
  return use;
}

/** The model's graph built to hold its weights where the cache says (`build(file)`; no file:
 * a private copy in the temporary folder), and how the load uses the cache. */
export function buildWithHeldCache<G extends { heldWeights?: HeldWeights }>(
  cached: HeldCachePath,
  model: string,
  sources: readonly string[],
  build: (heldFile: string | undefined) => G,
): { graph: G; cache: HeldCacheUse } {
  let graph = build('file' in cached ? cached.file : undefined);
  let cache = cacheUse(cached, model, graph.heldWeights, sources);
  if (cache.kind === 'rebuild') {
    graph = build(cache.file);
    cache = cacheUse(cached, model, graph.heldWeights, sources);
  }
  if (cache.kind === 'rebuild') throw new Error(`the weights cache asked twice for a new copy of ${model}'s held weights`);
  return { graph, cache };
}
