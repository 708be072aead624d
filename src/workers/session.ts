// The session worker (session-host.ts): owns the model's onnxruntime sessions and the KV
// kept between passes, and runs passes off the main thread (onnxruntime-node's `run()`
// runs the whole pass on the calling thread).
import { parentPort } from 'node:worker_threads';
import ort from 'onnxruntime-node';

/** A feed or an output: element type, dimensions, values. */
export interface HostTensor {
  type: 'int64' | 'float32' | 'float16' | 'bool';
  dims: number[];
  data: BigInt64Array | Float32Array | Uint16Array | Uint8Array;
}

export interface RunRequest {
  session: string;
  feeds: Record<string, HostTensor>;
  fetches: string[];
  /** Feed the KV kept under this handle as `past.L.key/value` (default: an empty past). */
  past?: number;
  /** Per row of the pass: the row of the past it continues, and that row's valid slots
   * (the row's new tokens' KV follows them). */
  pastRows: number[];
  pastLengths: number[];
  /** The past's slots per row as the pass sees them (its keys are these and its new
   * tokens'): the KV under `past` may have more, room laid out for the new slots. */
  pastSlots: number;
  numLayers: number;
  /** Keep this pass's whole KV (each row's past, then its new slots) under a new handle. */
  keepPresent?: boolean;
  /** The empty past's shape: [rows, kv_heads, 0, head_dim], in the KV dtype. */
  emptyPast: { type: 'float32' | 'float16'; dims: number[] };
}

export interface RunResult {
  outputs: Record<string, HostTensor>;
  present?: number;
}

/** A piece of kept KV: `count` positions of row `row` of the KV under `handle`, from `offset`. */
export interface KvPieceRef {
  handle: number;
  row: number;
  offset: number;
  count: number;
}

/** What the host asks, and what each answers. */
export type SessionMessage =
  | { op: 'create'; name: string; model: Uint8Array; options: ort.InferenceSession.SessionOptions }
  | { op: 'run'; run: RunRequest }
  | { op: 'gather'; rows: KvPieceRef[][]; length: number }
  | { op: 'gatherEach'; layouts: { rows: KvPieceRef[][]; length: number }[] }
  | { op: 'dropPast'; handle: number }
  | { op: 'keptPasts' }
  | { op: 'laidOutBytes' }
  | { op: 'release' }
  | { op: 'exitForTest' };

export type SessionReply = { id: number; result: unknown } | { id: number; error: string };

type KvTensor = ort.Tensor & { data: Float32Array | Uint16Array };

/** KV kept under a handle; per layer its key then its value, each [rows, kv_heads, slots,
 * head_dim], in one or two parts laid end to end (a part before the last one full in every
 * row). `laidOut`: every row all of its slots (a gather's: a long past kept whole may be
 * its first part as it lies, the pieces after it laid out as the second). `extended`: a
 * pass's KV as the pass saw it — row b the first `pastLengths[b]` slots of row
 * `pastRows[b]` of the past it was fed, then its new tokens' — kept without copying that
 * past again: the graph returns only the new tokens' KV. */
type Parts = KvTensor[][];
type KvEntry = { kind: 'laidOut'; parts: Parts } | { kind: 'extended'; parts: Parts; pastSlots: number; pastRows: number[]; pastLengths: number[]; fresh: KvTensor[] };

const sessions = new Map<string, ort.InferenceSession>();
const pasts = new Map<number, KvEntry>();
let nextHandle = 1;
/** KV bytes copied into layouts since the thread started. */
let laidOutBytes = 0;
const tensor = (t: HostTensor) => new ort.Tensor(t.type, t.data, t.dims);
const plain = (t: ort.Tensor): HostTensor => ({ type: t.type as HostTensor['type'], dims: [...t.dims], data: (t.data as HostTensor['data']).slice() });

// onnxruntime caches a memory pattern per set of input shapes, keyed by an XOR of every
// input dim, so unrelated passes collide (a 1024-token pass after 1024 cached has the key of
// a 4 × 2048-token probe pass; a probe input of [B, S] cancels key_positions' S) and then
// reuse a pattern that does not fit: every tensor falls back to its own allocation
// (measured: 1100 ms instead of 700 for that pass, every time). The graphs take one more
// input, unread, whose length is a hash of all the other shapes: it moves the XOR key.
function shapeSalt(feeds: Record<string, ort.Tensor>): ort.Tensor {
  let h = 2166136261;
  for (const name of Object.keys(feeds).sort()) {
    for (const c of name) h = Math.imul(h ^ c.charCodeAt(0), 16777619);
    for (const d of feeds[name]!.dims) h = Math.imul(h ^ (d + 0x9e37), 16777619);
  }
  const length = 1 + ((h >>> 0) % 65521);
  return new ort.Tensor('bool', new Uint8Array(length), [length]);
}

function kept(handle: number): KvEntry {
  const kv = pasts.get(handle);
  if (!kv) throw new Error(`past KV handle ${handle} is gone`);
  return kv;
}

const slotsOf = (t: KvTensor) => t.dims[2]!;
const partsWidth = (parts: Parts) => parts.reduce((n, p) => n + slotsOf(p[0]!), 0);

/** Slots per row of an entry (the engine's `PastKV.length`). */
function width(kv: KvEntry): number {
  return kv.kind === 'laidOut' ? partsWidth(kv.parts) : kv.pastSlots + slotsOf(kv.fresh[0]!);
}

/** Slots row `row` of an entry holds: an extended row's past, then its new slots. */
function rowSlots(kv: KvEntry, row: number): number {
  return kv.kind === 'laidOut' ? width(kv) : kv.pastLengths[row]! + slotsOf(kv.fresh[0]!);
}

/** Where slots [offset, offset + count) of `row` lie for tensor `i` (layer·2 + key/value):
 * a stretch of each part they reach (an extended row's past: its first pastLengths[row]
 * slots), then of its new slots. */
function stretches(kv: KvEntry, i: number, row: number, offset: number, count: number): { src: KvTensor; row: number; offset: number; count: number }[] {
  const out: { src: KvTensor; row: number; offset: number; count: number }[] = [];
  const end = offset + count;
  let at = 0;
  const take = (src: KvTensor, srcRow: number, slots: number) => {
    const from = Math.max(offset, at);
    const to = Math.min(end, at + slots);
    if (to > from) out.push({ src, row: srcRow, offset: from - at, count: to - from });
    at += slots;
  };
  let past = kv.kind === 'laidOut' ? Infinity : kv.pastLengths[row]!;
  const pastRow = kv.kind === 'laidOut' ? row : kv.pastRows[row]!;
  for (const part of kv.parts) {
    const slots = Math.min(slotsOf(part[i]!), past);
    take(part[i]!, pastRow, slots);
    past -= slots;
  }
  if (kv.kind === 'extended') take(kv.fresh[i]!, row, slotsOf(kv.fresh[i]!));
  return out;
}

/** rows[b]: pieces laid end to end, right-padded to `length`: one tensor per layer and kind. */
function layOut(rows: KvPieceRef[][], length: number, proto: KvEntry): KvTensor[] {
  const B = rows.length;
  const first = proto.parts[0]!;
  const out: KvTensor[] = [];
  for (let i = 0; i < first.length; i++) {
    const [, H, , D] = first[i]!.dims as [number, number, number, number];
    const data = first[i]!.data instanceof Uint16Array ? new Uint16Array(B * H * length * D) : new Float32Array(B * H * length * D);
    rows.forEach((pieces, b) => {
      let at = 0;
      for (const p of pieces) {
        for (const s of stretches(kept(p.handle), i, p.row, p.offset, p.count)) {
          const Ps = s.src.dims[2]!;
          for (let h = 0; h < H; h++) {
            const from = ((s.row * H + h) * Ps + s.offset) * D;
            data.set(s.src.data.subarray(from, from + s.count * D), ((b * H + h) * length + at) * D);
          }
          laidOutBytes += H * s.count * D * data.BYTES_PER_ELEMENT;
          at += s.count;
        }
      }
    });
    out.push(new ort.Tensor(first[i]!.type, data, [B, H, length, D]) as KvTensor);
  }
  return out;
}

/** The past a pass is fed, in two parts (past, recent), and the row of it each pass row
 * continues: the kept parts themselves when they are laid out (a decode step's gathered
 * past; the distinct pasts of rows that share them, which the graph gathers per row),
 * else each pass row's past laid out once (a query block continuing the one before). */
function pastFeeds(r: RunRequest): { past: KvTensor[]; recent: KvTensor[]; rows: number[] } {
  const { type, dims } = r.emptyPast;
  const B = r.pastRows.length;
  const empty = (rows: number) =>
    Array.from({ length: 2 * r.numLayers }, () => new ort.Tensor(type, type === 'float16' ? new Uint16Array(0) : new Float32Array(0), [rows, ...dims.slice(1)]) as KvTensor);
  const identity = Array.from({ length: B }, (_, b) => b);
  if (r.past === undefined) return { past: empty(B), recent: empty(B), rows: identity };
  const kv = kept(r.past);
  if (kv.kind === 'laidOut') {
    const rows = kv.parts[0]![0]!.dims[0]!;
    // As many rows as the pass: row b is row b (the graph reads past_rows only when the
    // past has fewer rows than the pass).
    if (rows === B && r.pastRows.every((row, b) => row === b)) return { past: kv.parts[0]!, recent: kv.parts[1] ?? empty(B), rows: identity };
    if (rows < B) return { past: kv.parts[0]!, recent: kv.parts[1] ?? empty(rows), rows: r.pastRows };
  }
  const rows = r.pastRows.map((row) => [{ handle: r.past!, row, offset: 0, count: rowSlots(kv, row) }]);
  return { past: layOut(rows, width(kv), kv), recent: empty(B), rows: identity };
}

async function run(r: RunRequest): Promise<RunResult> {
  const session = sessions.get(r.session);
  if (!session) throw new Error(`no session ${r.session}`);
  const feeds: Record<string, ort.Tensor> = {};
  for (const [k, v] of Object.entries(r.feeds)) feeds[k] = tensor(v);
  const { past, recent, rows } = pastFeeds(r);
  feeds.past_rows = new ort.Tensor('int64', BigInt64Array.from(rows, BigInt), [rows.length]);
  for (let i = 0; i < r.numLayers; i++) {
    feeds[`past.${i}.key`] = past[2 * i]!;
    feeds[`past.${i}.value`] = past[2 * i + 1]!;
    feeds[`recent.${i}.key`] = recent[2 * i]!;
    feeds[`recent.${i}.value`] = recent[2 * i + 1]!;
  }
  feeds.shape_salt = shapeSalt(feeds);
  const fetches = [...r.fetches];
  if (r.keepPresent) for (let i = 0; i < r.numLayers; i++) fetches.push(`new.${i}.key`, `new.${i}.value`);
  const out = await session.run(feeds, fetches);
  const outputs: Record<string, HostTensor> = {};
  for (const name of r.fetches) outputs[name] = plain(out[name]!);
  if (!r.keepPresent) return { outputs };
  const fresh: KvTensor[] = [];
  for (let i = 0; i < r.numLayers; i++) fresh.push(out[`new.${i}.key`] as KvTensor, out[`new.${i}.value`] as KvTensor);
  const present = nextHandle++;
  const parts = [past, recent].filter((p) => slotsOf(p[0]!) > 0);
  pasts.set(present, parts.length === 0 ? { kind: 'laidOut', parts: [fresh] } : { kind: 'extended', parts, pastSlots: r.pastSlots, pastRows: rows, pastLengths: r.pastLengths, fresh });
  return { outputs, present };
}

/** Row `row` of a one-part laid-out entry as a tensor of its own, sharing its memory. */
function rowView(kv: KvEntry & { kind: 'laidOut' }, row: number): KvTensor[] {
  return kv.parts[0]!.map((t) => {
    const [B, H, S, D] = t.dims as [number, number, number, number];
    const n = H * S * D;
    return (B === 1 ? t : new ort.Tensor(t.type, t.data.subarray(row * n, (row + 1) * n), [1, H, S, D])) as KvTensor;
  });
}

/** rows[b]: pieces laid end to end, right-padded to `length`, kept under a new handle. */
// One row whose first piece is a whole one-part row (the prefix cache's compacted copy of
// a sequence, a prompt's KV) keeps that piece where it lies and lays out only the pieces
// after it (the tokens generated since): a decode step with a 1900-token past copied 61 MiB
// outside the graph before it ran (measured: the gather 8–25 ms of a 40 ms step).
function gather(rows: KvPieceRef[][], length: number): { handle: number } {
  const [first, ...rest] = rows[0]!;
  const kv = first && kept(first.handle);
  let entry: KvEntry;
  if (rows.length === 1 && kv?.kind === 'laidOut' && kv.parts.length === 1 && first!.offset === 0 && first!.count === width(kv)) {
    const base = rowView(kv, first!.row);
    entry = { kind: 'laidOut', parts: rest.length > 0 ? [base, layOut([rest], length - first!.count, kv)] : [base] };
  } else entry = { kind: 'laidOut', parts: [layOut(rows, length, kept(rows.flat()[0]!.handle))] };
  const handle = nextHandle++;
  pasts.set(handle, entry);
  return { handle };
}

async function handle(msg: SessionMessage): Promise<unknown> {
  switch (msg.op) {
    case 'create':
      sessions.set(msg.name, await ort.InferenceSession.create(msg.model, msg.options));
      return {};
    case 'run':
      return run(msg.run);
    case 'gather':
      return gather(msg.rows, msg.length);
    case 'gatherEach':
      return { handles: msg.layouts.map((l) => gather(l.rows, l.length).handle) };
    case 'dropPast':
      pasts.delete(msg.handle);
      return {};
    case 'keptPasts':
      return { count: pasts.size };
    case 'laidOutBytes':
      return { bytes: laidOutBytes };
    case 'release':
      for (const s of sessions.values()) await s.release();
      sessions.clear();
      pasts.clear();
      return {};
    case 'exitForTest':
      // Only CTXPROBE_TEST_HOOKS sends this: the thread ends as a crash would end it.
      process.exit(3);
  }
}

const port = parentPort!;
port.on('message', (msg: SessionMessage & { id: number }) => {
  handle(msg).then(
    (result) => {
      const transfer = Object.values((result as Partial<RunResult>).outputs ?? {}).map((t) => t.data.buffer as ArrayBuffer);
      port.postMessage({ id: msg.id, result } satisfies SessionReply, transfer);
    },
    (e) => port.postMessage({ id: msg.id, error: String((e as Error)?.message ?? e) } satisfies SessionReply),
  );
});
