// The session worker (session-host.ts): owns the model's onnxruntime sessions and the KV
// kept between passes, and runs passes off the main thread (onnxruntime-node's `run()`
// runs the whole pass on the calling thread).
import { parentPort, workerData } from 'node:worker_threads';
import ort from 'onnxruntime-node';
import { packIndexFeeds, type Int64Feed, type IndexFeedPlan } from '../graph/index-feeds.js';

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
  /** Bytes that crossed between host and device: the feeds besides the past as the session
   * took them (index feeds packed), the past fed (host-held KV given to a GPU session; on
   * the CPU the session reads it in place), the present kept, and the layout indices
   * uploaded for this pass. */
  moved: { inputs: number; pastKv: number; presentKv: number; layoutIndex: number };
}

/** Kept KV on the GPU (the WebGPU provider): the model session's new keys and values stay
 * in device buffers, and layouts run as these graphs (one per source count, kv-layout.ts). */
export interface DeviceKv {
  layouts: { sources: number; model: Uint8Array }[];
  kvHeads: number;
  headDim: number;
  type: 'float32' | 'float16';
  /** Options of the layout sessions (the model session's provider). */
  options: ort.InferenceSession.SessionOptions;
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
  | { op: 'create'; name: string; model: Uint8Array; options: ort.InferenceSession.SessionOptions; deviceKv?: DeviceKv; indexFeeds?: IndexFeedPlan }
  | { op: 'run'; run: RunRequest }
  | { op: 'gather'; rows: KvPieceRef[][]; length: number }
  | { op: 'gatherEach'; layouts: { rows: KvPieceRef[][]; length: number }[] }
  | { op: 'dropPast'; handle: number }
  | { op: 'keptPasts' }
  | { op: 'laidOutBytes' }
  | { op: 'keptTensors' }
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
type KvEntry =
  // `pieces`: on the device, the kept pieces a gather laid it out from, row by row.
  | { kind: 'laidOut'; parts: Parts; pieces?: KvPieceRef[][] }
  | { kind: 'extended'; parts: Parts; pastSlots: number; pastRows: number[]; pastLengths: number[]; fresh: KvTensor[] }
  // On the device, a few slots of one kept tensor per layer and kind, kept as they lie
  // (`parts` is those tensors): one row of `length` slots, its first `count` from slots
  // [offset, offset + count) of row `row`, zeros after (`gather`).
  | { kind: 'view'; parts: Parts; row: number; offset: number; count: number; length: number };

const sessions = new Map<string, ort.InferenceSession>();
/** Sessions whose graphs take their index feeds as one input (graph/index-feeds.ts). */
const indexFeedPlans = new Map<string, IndexFeedPlan>();
/** On the device, the keys and values whole of the last kept pass of decode steps
 * (`full.L.*`, every layer's key then value; row b its past then its new tokens), with the
 * pieces its rows' pasts were gathered from and its new KV: the next step's past, when that
 * step's rows are these rows' pieces and each its new tokens (`gather`). One at a time. */
let latestFull: { tensors: KvTensor[]; pieces: KvPieceRef[][]; fresh: KvTensor; slots: number } | undefined;
function setLatestFull(next: typeof latestFull): void {
  if (latestFull) unhold(latestFull.tensors);
  latestFull = next;
  if (next) hold(next.tensors);
}
const pasts = new Map<number, KvEntry>();
let nextHandle = 1;
/** KV bytes copied into layouts since the thread started, and layout graph runs. */
let laidOutBytes = 0;
let layoutRuns = 0;
/** Set when the model runs on a GPU provider that keeps its KV on the device. */
let deviceKv: DeviceKv | undefined;
const layoutSessions = new Map<number, Promise<ort.InferenceSession>>();
/** Layout index bytes uploaded since the last pass took them into its count. */
let layoutIndexBytes = 0;

// Tensors of kept KV are shared: an extended entry holds the past it was fed (another
// entry's, or a layout made for the pass), a row view may be its source itself. Each is
// counted by the entries and passes holding it; a GPU tensor is disposed when none does
// (onnxruntime-node frees a GPU buffer on dispose() only, never on garbage collection:
// WEBGPU-NODE.md §1, memory grew by one KV a pass without it).
const holders = new Map<ort.Tensor, number>();
function hold(ts: Iterable<ort.Tensor>): void {
  for (const t of ts) holders.set(t, (holders.get(t) ?? 0) + 1);
}
function unhold(ts: Iterable<ort.Tensor>): void {
  for (const t of ts) {
    const n = (holders.get(t) ?? 1) - 1;
    if (n > 0) {
      holders.set(t, n);
      continue;
    }
    holders.delete(t);
    if (t.location === 'gpu-buffer') t.dispose();
  }
}
const entryTensors = (kv: KvEntry): KvTensor[] => [...kv.parts.flat(), ...(kv.kind === 'extended' ? kv.fresh : [])];
function keep(entry: KvEntry): number {
  const handle = nextHandle++;
  hold(entryTensors(entry));
  pasts.set(handle, entry);
  return handle;
}
const tensor = (t: HostTensor) => new ort.Tensor(t.type, t.data, t.dims);
const plain = (t: ort.Tensor): HostTensor => ({
  type: t.type as HostTensor['type'],
  dims: [...t.dims],
  data: (t.data as HostTensor['data']).slice(),
});

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
  switch (kv.kind) {
    case 'laidOut':
      return partsWidth(kv.parts);
    case 'extended':
      return kv.pastSlots + slotsOf(kv.fresh[0]!);
    case 'view':
      return kv.length;
  }
}

/** Slots row `row` of an entry holds: an extended row's past, then its new slots. */
function rowSlots(kv: KvEntry, row: number): number {
  switch (kv.kind) {
    case 'laidOut':
      return width(kv);
    case 'extended':
      return kv.pastLengths[row]! + slotsOf(kv.fresh[0]!);
    case 'view':
      return kv.count;
  }
}

/** Where slots [offset, offset + count) of `row` lie for tensor `i` (layer·2 + key/value):
 * a stretch of each part they reach (an extended row's past: its first pastLengths[row]
 * slots), then of its new slots. */
function stretches(
  kv: KvEntry,
  i: number,
  row: number,
  offset: number,
  count: number,
): { src: KvTensor; row: number; offset: number; count: number }[] {
  const out: { src: KvTensor; row: number; offset: number; count: number }[] = [];
  if (kv.kind === 'view') {
    const n = Math.min(count, kv.count - offset);
    if (n > 0) out.push({ src: kv.parts[0]![i]!, row: kv.row, offset: kv.offset + offset, count: n });
    return out;
  }
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
function layOut(rows: KvPieceRef[][], length: number, proto: KvEntry): Promise<KvTensor[]> | KvTensor[] {
  return deviceKv ? layOutOnDevice(rows, length, proto) : layOutOnHost(rows, length, proto);
}

function layOutOnHost(rows: KvPieceRef[][], length: number, proto: KvEntry): KvTensor[] {
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

// ---- layouts on the GPU ----------------------------------------------------------------

/** Slots [offset, offset + count) of row `row` of source `j`. */
interface SourceStretch {
  j: number;
  row: number;
  offset: number;
  count: number;
}

/** The same layout as layOutOnHost, run as a layout graph on the device: every tensor's
 * sources (distinct kept tensors the pieces lie in) and each output row's stretches of them. */
async function layOutOnDevice(rows: KvPieceRef[][], length: number, proto: KvEntry): Promise<KvTensor[]> {
  const tensors = proto.parts[0]!.length;
  const sources: KvTensor[][] = Array.from({ length: tensors }, () => []);
  const known = new Map<KvTensor, number>();
  const plan = rows.map((pieces) => {
    const out: SourceStretch[] = [];
    for (const p of pieces) {
      const kv = kept(p.handle);
      const each = Array.from({ length: tensors }, (_, i) => stretches(kv, i, p.row, p.offset, p.count));
      each[0]!.forEach((s, k) => {
        let j = known.get(s.src);
        if (j === undefined) {
          j = known.size;
          known.set(s.src, j);
          for (let i = 0; i < tensors; i++) sources[i]!.push(each[i]![k]!.src);
        }
        out.push({ j, row: s.row, offset: s.offset, count: s.count });
        laidOutBytes += tensors * s.src.dims[1]! * s.count * s.src.dims[3]! * (s.src.type === 'float16' ? 2 : 4);
      });
    }
    return out;
  });
  return runLayout(sources, plan, length);
}

/** Sources per tensor ([i][j], each [Bⱼ, H, Sⱼ, D]) → [B, H, length, D] per tensor, row b the
 * stretches plan[b] end to end, zeros after. More sources than one graph takes: rows in
 * groups first, then the groups' outputs as the sources of one more layout. */
async function runLayout(sources: KvTensor[][], plan: SourceStretch[][], length: number): Promise<KvTensor[]> {
  const dk = deviceKv!;
  const B = plan.length;
  const n = sources[0]!.length;
  if (B * length === 0 || n === 0) {
    return sources.map(
      () =>
        new ort.Tensor(dk.type, dk.type === 'float16' ? new Uint16Array(0) : new Float32Array(0), [
          B,
          dk.kvHeads,
          length,
          dk.headDim,
        ]) as KvTensor,
    );
  }
  // Held while the layout runs: a drop of their entry meanwhile must not free them.
  const held = sources.flat();
  hold(held);
  try {
    return await (n > MAX_SOURCES ? runLayoutInGroups(sources, plan, length) : runLayoutOnce(sources, plan, length));
  } finally {
    unhold(held);
  }
}

async function runLayoutOnce(sources: KvTensor[][], plan: SourceStretch[][], length: number): Promise<KvTensor[]> {
  const dk = deviceKv!;
  const B = plan.length;
  const n = sources[0]!.length;
  let bucket = 1;
  while (bucket < n) bucket *= 2;
  const session = await layoutSession(bucket);
  const feeds: Record<string, ort.Tensor> = {};
  // Each source read as rows of D: source j's first pool row, then (row, head, slot) on.
  const firstRow: number[] = [];
  let total = 0;
  for (let j = 0; j < bucket; j++) {
    const real = j < n;
    for (let i = 0; i < sources.length; i++) feeds[`src.${i}.${j}`] = real ? sources[i]![j]! : zeroSlot();
    firstRow.push(total);
    const [rows, heads, slots] = real ? (sources[0]![j]!.dims as number[]) : [1, dk.kvHeads, 1];
    total += rows! * heads! * slots!;
  }
  // Per output slot (b, t): its pool row for head 0 and the rows between heads; padding
  // reads the zero row after the pool, whatever the head.
  const base = new Int32Array(B * length).fill(total);
  const stride = new Int32Array(B * length);
  plan.forEach((row, b) => {
    let at = b * length;
    for (const s of row) {
      const [, heads, slots] = sources[0]![s.j]!.dims as number[];
      const first = firstRow[s.j]! + s.row * heads! * slots! + s.offset;
      for (let t = 0; t < s.count; t++) {
        base[at + t] = first + t;
        stride[at + t] = slots!;
      }
      at += s.count;
    }
  });
  feeds.base = new ort.Tensor('int32', base, [B, 1, length]);
  feeds.stride = new ort.Tensor('int32', stride, [B, 1, length]);
  feeds.shape = new ort.Tensor('int64', BigInt64Array.from([B, dk.kvHeads, length, dk.headDim], BigInt), [4]);
  layoutIndexBytes += base.byteLength + stride.byteLength;
  const out = await session.run(feeds);
  layoutRuns++;
  return sources.map((_, i) => out[`out.${i}`] as KvTensor);
}

async function runLayoutInGroups(sources: KvTensor[][], plan: SourceStretch[][], length: number): Promise<KvTensor[]> {
  const groups: { rows: number[]; used: Map<number, number> }[] = [];
  plan.forEach((row, b) => {
    const mine = new Set(row.map((s) => s.j));
    if (mine.size > MAX_SOURCES) throw new Error(`a row of kept KV lies in ${mine.size} pieces, more than a layout takes (${MAX_SOURCES})`);
    let group = groups.at(-1);
    const added = group ? [...mine].filter((j) => !group!.used.has(j)).length : Infinity;
    if (!group || group.used.size + added > MAX_SOURCES) groups.push((group = { rows: [], used: new Map() }));
    for (const j of mine) if (!group.used.has(j)) group.used.set(j, group.used.size);
    group.rows.push(b);
  });
  const parts: KvTensor[][] = [];
  try {
    for (const group of groups) {
      const local = sources.map((perTensor) => [...group.used.keys()].map((j) => perTensor[j]!));
      const part = await runLayout(
        local,
        group.rows.map((b) => plan[b]!.map((s) => ({ ...s, j: group.used.get(s.j)! }))),
        length,
      );
      hold(part);
      parts.push(part);
    }
    const rowsOf = groups.flatMap((group, k) => group.rows.map((b, r) => ({ b, stretch: { j: k, row: r, offset: 0, count: length } })));
    rowsOf.sort((x, y) => x.b - y.b);
    return await runLayout(
      sources.map((_, i) => parts.map((p) => p[i]!)),
      rowsOf.map((r) => [r.stretch]),
      length,
    );
  } finally {
    for (const p of parts) unhold(p);
  }
}

const MAX_SOURCES = 256;
let zeroSlotTensor: ort.Tensor | undefined;
/** A one-slot zero tensor for a layout graph's unused source inputs (never indexed). */
function zeroSlot(): ort.Tensor {
  const dk = deviceKv!;
  const size = dk.kvHeads * dk.headDim;
  zeroSlotTensor ??= new ort.Tensor(dk.type, dk.type === 'float16' ? new Uint16Array(size) : new Float32Array(size), [
    1,
    dk.kvHeads,
    1,
    dk.headDim,
  ]);
  return zeroSlotTensor;
}

function layoutSession(sources: number): Promise<ort.InferenceSession> {
  const dk = deviceKv!;
  let session = layoutSessions.get(sources);
  if (!session) {
    const model = dk.layouts.find((l) => l.sources === sources)?.model;
    if (!model) throw new Error(`no KV layout graph for ${sources} sources`);
    session = ort.InferenceSession.create(model, { ...dk.options, preferredOutputLocation: 'gpu-buffer' });
    layoutSessions.set(sources, session);
  }
  return session;
}

/** The past a pass is fed, in two parts (past, recent), and the row of it each pass row
 * continues: the kept parts themselves when they are laid out (a decode step's gathered
 * past; the distinct pasts of rows that share them, which the graph gathers per row),
 * else each pass row's past laid out once (a query block continuing the one before). */
async function pastFeeds(r: RunRequest): Promise<{ past: KvTensor[]; recent: KvTensor[]; rows: number[] }> {
  const { type, dims } = r.emptyPast;
  const B = r.pastRows.length;
  const empty = (rows: number) =>
    Array.from(
      { length: 2 * r.numLayers },
      () => new ort.Tensor(type, type === 'float16' ? new Uint16Array(0) : new Float32Array(0), [rows, ...dims.slice(1)]) as KvTensor,
    );
  const identity = Array.from({ length: B }, (_, b) => b);
  if (r.past === undefined) return { past: empty(B), recent: empty(B), rows: identity };
  const kv = kept(r.past);
  if (kv.kind === 'laidOut') {
    const rows = kv.parts[0]![0]!.dims[0]!;
    // As many rows as the pass: row b is row b (the graph reads past_rows only when the
    // past has fewer rows than the pass).
    if (rows === B && r.pastRows.every((row, b) => row === b))
      return { past: kv.parts[0]!, recent: kv.parts[1] ?? empty(B), rows: identity };
    if (rows < B) return { past: kv.parts[0]!, recent: kv.parts[1] ?? empty(rows), rows: r.pastRows };
  }
  const rows = r.pastRows.map((row) => [{ handle: r.past!, row, offset: 0, count: rowSlots(kv, row) }]);
  return { past: await layOut(rows, width(kv), kv), recent: empty(B), rows: identity };
}

/** Where a WebGPU pass's keys lie (the graph's `keySources`, past.ts), for its rows of
 * past, recent and new K/V end to end, in rows of head_dim values: each row's
 * [past length, past base, recent base, new base] (`kv_rows`) and [P₀, P₁, T, last row]
 * (`kv_steps`). */
function keySourceFeeds(r: RunRequest, past: KvTensor, recent: KvTensor, rows: number[], ids: readonly number[]): Record<string, ort.Tensor> {
  const [B, T] = ids as [number, number];
  const kv = past.dims[1]!;
  const [P0, P1] = [slotsOf(past), slotsOf(recent)];
  const pastRows = past.dims[0]! * kv * P0;
  const recentRows = recent.dims[0]! * kv * P1;
  const bases = new BigInt64Array(B * 4);
  for (let b = 0; b < B; b++) {
    const length = r.pastLengths[b]!;
    bases.set([length, rows[b]! * kv * P0, pastRows + rows[b]! * kv * P1 - P0, pastRows + recentRows + b * kv * T - length].map(BigInt), 4 * b);
  }
  const steps = BigInt64Array.from([P0, P1, T, pastRows + recentRows + B * kv * T - 1], BigInt);
  return { kv_rows: new ort.Tensor('int64', bases, [B, 4]), kv_steps: new ort.Tensor('int64', steps, [4]) };
}

const hostBytes = (ts: ort.Tensor[]) => ts.reduce((n, t) => n + (t.location === 'cpu' ? (t.data as ArrayBufferView).byteLength : 0), 0);

async function run(r: RunRequest): Promise<RunResult> {
  const session = sessions.get(r.session);
  if (!session) throw new Error(`no session ${r.session}`);
  const feeds: Record<string, ort.Tensor> = {};
  for (const [k, v] of Object.entries(r.feeds)) feeds[k] = tensor(v);
  const { past, recent, rows } = await pastFeeds(r);
  // The pass holds what it reads until it ends: a past laid out for it is freed then unless
  // its present keeps it, and a kept past dropped meanwhile stays until the pass is done.
  const fed = [...past, ...recent];
  hold(fed);
  try {
    const plan = indexFeedPlans.get(r.session);
    if (plan?.feeds.some((f) => f.name === 'kv_rows')) Object.assign(feeds, keySourceFeeds(r, past[0]!, recent[0]!, rows, feeds.input_ids!.dims));
    else feeds.past_rows = new ort.Tensor('int64', BigInt64Array.from(rows, BigInt), [rows.length]);
    for (let i = 0; i < r.numLayers; i++) {
      feeds[`past.${i}.key`] = past[2 * i]!;
      feeds[`past.${i}.value`] = past[2 * i + 1]!;
      feeds[`recent.${i}.key`] = recent[2 * i]!;
      feeds[`recent.${i}.value`] = recent[2 * i + 1]!;
    }
    feeds.shape_salt = shapeSalt(feeds);
    if (plan) {
      const packed = packIndexFeeds(plan, feeds as Record<string, Int64Feed>);
      for (const f of plan.feeds) delete feeds[f.name];
      for (const [name, t] of Object.entries(packed)) feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
    }
    // What goes up with the pass besides its past: the feeds as fed (index feeds packed),
    // but for the salt, which no node reads.
    const inputBytes = hostBytes(Object.entries(feeds).filter(([name, t]) => name !== 'shape_salt' && !fed.includes(t as KvTensor)).map(([, t]) => t));
    const fetches = [...r.fetches];
    if (r.keepPresent) for (let i = 0; i < r.numLayers; i++) fetches.push(`new.${i}.key`, `new.${i}.value`);
    if (r.keepPresent && deviceKv) for (let i = 0; i < r.numLayers; i++) fetches.push(`full.${i}.key`, `full.${i}.value`);
    const out = await session.run(feeds, deviceKv ? session.outputNames : fetches);
    const outputs: Record<string, HostTensor> = {};
    for (const name of r.fetches) outputs[name] = plain(out[name]!);
    // A session with outputs on the device runs through one IO binding that keeps every
    // output it ever bound: an output fetched once and not the next time stays bound to the
    // earlier run's tensor, which onnxruntime then takes as a preallocated output (a shape
    // error, or the next run writing into a KV we keep). So such a session fetches every
    // output every run, and frees the device ones nobody asked for.
    if (deviceKv)
      for (const name of session.outputNames) if (!fetches.includes(name) && out[name]?.location === 'gpu-buffer') out[name]!.dispose();
    // The layouts' slot maps since the last pass: this pass's past (laid out by a gather
    // before it, or here) and the prefix cache's segments of the pass before.
    const moved = { inputs: inputBytes, pastKv: deviceKv ? hostBytes([...past, ...recent]) : 0, presentKv: 0, layoutIndex: layoutIndexBytes };
    layoutIndexBytes = 0;
    if (!r.keepPresent) return { outputs, moved };
    const fresh: KvTensor[] = [];
    for (let i = 0; i < r.numLayers; i++) fresh.push(out[`new.${i}.key`] as KvTensor, out[`new.${i}.value`] as KvTensor);
    moved.presentKv = deviceKv ? hostBytes(fresh) : 0;
    if (deviceKv) keepFull(r, out, fresh, rows);
    const parts = [past, recent].filter((p) => slotsOf(p[0]!) > 0);
    const present = keep(
      parts.length === 0
        ? { kind: 'laidOut', parts: [fresh] }
        : { kind: 'extended', parts, pastSlots: r.pastSlots, pastRows: rows, pastLengths: r.pastLengths, fresh },
    );
    return { outputs, present, moved };
  } finally {
    unhold(fed);
  }
}

/** A kept pass's keys and values whole (`full.L.*`, returned by passes of decode steps) as
 * the next step's past, when its rows' pasts were gathered from kept pieces, row b from row
 * b; else they are freed. */
function keepFull(r: RunRequest, out: Record<string, ort.Tensor>, fresh: KvTensor[], rows: number[]): void {
  const full: KvTensor[] = [];
  for (let i = 0; i < r.numLayers; i++) full.push(out[`full.${i}.key`] as KvTensor, out[`full.${i}.value`] as KvTensor);
  const fed = r.past === undefined ? undefined : pasts.get(r.past);
  const pieces = fed?.kind === 'laidOut' ? fed.pieces : undefined;
  if (slotsOf(full[0]!) > 0 && pieces && pieces.length === rows.length && rows.every((row, b) => row === b)) {
    setLatestFull({ tensors: full, pieces, fresh: fresh[0]!, slots: slotsOf(full[0]!) });
  } else {
    for (const t of full) if (t.location === 'gpu-buffer') t.dispose();
  }
}

/** The last decode pass's keys and values whole, if `rows` are its rows continued: row b
 * the pieces row b's past came from, then row b's new tokens (a view of the pass's new KV),
 * and `length` slots fit in them. */
function fullFor(rows: KvPieceRef[][], length: number): KvTensor[] | undefined {
  const f = latestFull;
  if (!f || rows.length !== f.pieces.length || f.slots < length) return undefined;
  const same = (a: KvPieceRef, b: KvPieceRef) => a.handle === b.handle && a.row === b.row && a.offset === b.offset && a.count === b.count;
  const continued = rows.every((pieces, b) => {
    const last = pieces.at(-1);
    const kv = last && pasts.get(last.handle);
    const before = f.pieces[b]!;
    return (
      kv?.kind === 'view' &&
      kv.parts[0]![0] === f.fresh &&
      kv.row === b &&
      kv.offset === 0 &&
      last!.offset === 0 &&
      pieces.length === before.length + 1 &&
      before.every((p, k) => same(p, pieces[k]!))
    );
  });
  return continued ? f.tensors : undefined;
}

/** Row `row` of a one-part laid-out entry as a tensor of its own: on the host a view of its
 * memory; on the GPU the tensor itself when it has one row, else a copy of the row. */
async function rowView(kv: KvEntry & { kind: 'laidOut' }, row: number): Promise<KvTensor[]> {
  const tensors = kv.parts[0]!;
  const [B, H, S, D] = tensors[0]!.dims as [number, number, number, number];
  if (B === 1) return tensors;
  if (deviceKv)
    return runLayout(
      tensors.map((t) => [t]),
      [[{ j: 0, row, offset: 0, count: S }]],
      S,
    );
  const n = H * S * D;
  return tensors.map((t) => new ort.Tensor(t.type, t.data.subarray(row * n, (row + 1) * n), [1, H, S, D]) as KvTensor);
}

/** How `gather` makes rows[b] (pieces laid end to end, right-padded to `length`):
 * - `full`: the last decode pass's keys and values whole (its rows continued, `fullFor`);
 * - `view`: one piece of a few slots, kept as it lies (`viewOf`);
 * - `keptRow`: one row whose first piece is a whole one-part row (the prefix cache's
 *   compacted copy of a sequence, a prompt's KV), read where it lies, and only the pieces
 *   after it (the tokens generated since) laid out: a decode step with a 1900-token past
 *   copied 61 MiB outside the graph before it ran (measured: the gather 8–25 ms of a 40 ms
 *   step);
 * - `copy`: a layout of every piece. */
type GatherWay =
  | { way: 'full'; tensors: KvTensor[] }
  | { way: 'view'; view: Omit<KvEntry & { kind: 'view' }, 'length'> }
  | { way: 'keptRow'; kv: KvEntry & { kind: 'laidOut' }; first: KvPieceRef; rest: KvPieceRef[] }
  | { way: 'copy' };

function gatherWay(rows: KvPieceRef[][], length: number): GatherWay {
  const tensors = deviceKv ? fullFor(rows, length) : undefined;
  if (tensors) return { way: 'full', tensors };
  const [first, ...rest] = rows[0]!;
  if (rows.length !== 1 || !first) return { way: 'copy' };
  const view = deviceKv && rest.length === 0 ? viewOf(first) : undefined;
  if (view) return { way: 'view', view };
  const kv = kept(first.handle);
  if (kv.kind === 'laidOut' && kv.parts.length === 1 && first.offset === 0 && first.count === width(kv)) return { way: 'keptRow', kv, first, rest };
  return { way: 'copy' };
}

/** rows[b]: pieces laid end to end, right-padded to `length`, kept under a new handle. */
async function gather(rows: KvPieceRef[][], length: number): Promise<{ handle: number }> {
  const w = gatherWay(rows, length);
  const pieces = deviceKv ? { pieces: rows } : {};
  switch (w.way) {
    case 'full':
      return { handle: keep({ kind: 'laidOut', parts: [w.tensors], pieces: rows }) };
    case 'view':
      return { handle: keep({ ...w.view, length }) };
    case 'keptRow': {
      const base = await rowView(w.kv, w.first.row);
      const parts = w.rest.length > 0 ? [base, await layOut([w.rest], length - w.first.count, w.kv)] : [base];
      return { handle: keep({ kind: 'laidOut', parts, ...pieces }) };
    }
    case 'copy':
      return { handle: keep({ kind: 'laidOut', parts: [await layOut(rows, length, kept(rows.flat()[0]!.handle))], ...pieces }) };
  }
}

/** Pasts laid out from pieces, one handle per layout, as `gather` makes each. On the device,
 * the layouts of one row that `gather` would copy (the prefix cache taking a row of a
 * pass whole: a running generation every 16 tokens) are one layout of all their rows, each
 * kept as a view of its row: a layout graph run costs about the same whatever its rows
 * (H100, 16 streams: 16 such runs took 170–212 ms between two decode steps of 45 ms). */
async function gatherEach(layouts: { rows: KvPieceRef[][]; length: number }[]): Promise<number[]> {
  const handles: (number | undefined)[] = new Array(layouts.length);
  const together = deviceKv ? layouts.flatMap((l, i) => (l.rows.length === 1 && l.rows[0]!.length > 0 && gatherWay(l.rows, l.length).way === 'copy' ? [i] : [])) : [];
  if (together.length > 1) {
    const rows = together.map((i) => layouts[i]!.rows[0]!);
    const tensors = await layOutOnDevice(rows, Math.max(...together.map((i) => layouts[i]!.length)), kept(rows[0]![0]!.handle));
    together.forEach((i, row) => {
      const count = rows[row]!.reduce((n, p) => n + p.count, 0);
      handles[i] = keep({ kind: 'view', parts: [tensors], row, offset: 0, count, length: layouts[i]!.length });
    });
  }
  for (const [i, l] of layouts.entries()) handles[i] ??= (await gather(l.rows, l.length)).handle;
  return handles as number[];
}

/** The most slots a tensor may have to be kept in part as a view: a decode step's new KV
 * (its slots rounded up to fours). A view keeps its whole tensor alive, every row of it. */
const VIEW_MAX_SLOTS = 8;

/** A piece that lies in one stretch of one small tensor per layer and kind, as a view of
 * it: a decode step's new token going into the prefix cache. On the device a copy is a
 * layout graph, a session run of its own a step (on lavapipe 9.8 ms, besides the pass). */
function viewOf(p: KvPieceRef): Omit<KvEntry & { kind: 'view' }, 'length'> | undefined {
  const kv = kept(p.handle);
  // Every layer's and kind's tensors of an entry are laid out alike: the first decides.
  const [s, more] = stretches(kv, 0, p.row, p.offset, p.count);
  if (!s || more || s.count !== p.count || slotsOf(s.src) > VIEW_MAX_SLOTS) return undefined;
  const parts = [kv.parts[0]!.map((_, i) => stretches(kv, i, p.row, p.offset, p.count)[0]!.src)];
  return { kind: 'view', parts, row: s.row, offset: s.offset, count: p.count };
}

async function handle(msg: SessionMessage): Promise<unknown> {
  switch (msg.op) {
    case 'create':
      sessions.set(msg.name, await ort.InferenceSession.create(msg.model, msg.options));
      if (msg.indexFeeds && msg.indexFeeds.feeds.length > 0) indexFeedPlans.set(msg.name, msg.indexFeeds);
      if (msg.deviceKv) deviceKv = msg.deviceKv;
      return {};
    case 'run':
      return run(msg.run);
    case 'gather':
      return gather(msg.rows, msg.length);
    case 'gatherEach':
      return { handles: await gatherEach(msg.layouts) };
    case 'dropPast': {
      const kv = pasts.get(msg.handle);
      pasts.delete(msg.handle);
      if (kv) unhold(entryTensors(kv));
      return {};
    }
    case 'keptPasts':
      return { count: pasts.size };
    case 'laidOutBytes':
      return { bytes: laidOutBytes, runs: layoutRuns };
    case 'keptTensors':
      return { count: holders.size };
    case 'release':
      latestFull = undefined;
      for (const t of holders.keys()) if (t.location === 'gpu-buffer') t.dispose();
      holders.clear();
      pasts.clear();
      for (const s of [...sessions.values(), ...(await Promise.all(layoutSessions.values()))]) {
        // A profiled session writes its profile here (a no-op for the others).
        s.endProfiling();
        await s.release();
      }
      sessions.clear();
      indexFeedPlans.clear();
      layoutSessions.clear();
      return {};
    case 'exitForTest':
      // Only CTXPROBE_TEST_HOOKS sends this: the thread ends as a crash would end it.
      process.exit(3);
  }
}

// WebGPU work from two threads at once breaks Dawn's device (onnxruntime#32561; measured
// here: two models on --device webgpu in one process, "CommandEncoder is already finished"
// then std::bad_alloc). Every session thread of the process shares one lock (a
// SharedArrayBuffer from session-host.ts), and a thread on the GPU takes its messages one
// at a time, each under the lock. The CPU provider needs neither.
const gpuLock = (workerData as { gpuLock?: SharedArrayBuffer } | undefined)?.gpuLock;
const lockWord = gpuLock ? new Int32Array(gpuLock) : undefined;
let gpuQueue: Promise<unknown> = Promise.resolve();
const onGpu = (msg: SessionMessage) =>
  deviceKv !== undefined ||
  (msg.op === 'create' && (msg.options.executionProviders ?? []).some((p) => (typeof p === 'string' ? p : p.name) === 'webgpu'));

async function underGpuLock<T>(work: () => Promise<T>): Promise<T> {
  if (!lockWord) return work();
  while (Atomics.compareExchange(lockWord, 0, 0, 1) !== 0) Atomics.wait(lockWord, 0, 1, 100);
  try {
    return await work();
  } finally {
    Atomics.store(lockWord, 0, 0);
    Atomics.notify(lockWord, 0, 1);
  }
}

function dispatch(msg: SessionMessage): Promise<unknown> {
  if (!onGpu(msg)) return handle(msg);
  const done = gpuQueue.then(() => underGpuLock(() => handle(msg)));
  gpuQueue = done.catch(() => {});
  return done;
}

const port = parentPort!;
port.on('message', (msg: SessionMessage & { id: number }) => {
  dispatch(msg).then(
    (result) => {
      const transfer = Object.values((result as Partial<RunResult>).outputs ?? {}).map((t) => t.data.buffer as ArrayBuffer);
      port.postMessage({ id: msg.id, result } satisfies SessionReply, transfer);
    },
    (e) => port.postMessage({ id: msg.id, error: String((e as Error)?.message ?? e) } satisfies SessionReply),
  );
});
