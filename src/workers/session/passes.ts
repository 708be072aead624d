// The model's sessions and their passes on the session thread: the feeds a pass runs with
// (its own, its past as kept KV, where its keys lie), the run, the outputs sent back, and
// the pass's KV kept when asked.
import fs from 'node:fs';
import os from 'node:os';
import { MessageChannel } from 'node:worker_threads';
import ort from 'onnxruntime-node';
import { packIndexFeeds, type IndexFeedPlan, type Int64Feed } from '../../graph/index-feeds.js';
import { slotsOf, type KvStore, type KvTensor } from './kv-store.js';
import type { KvGather } from './gather.js';
import type { KvLayouts } from './layouts.js';
import { mappedFiles, writeHeldWeights } from '../../checkpoint/weight-files.js';
import { throttled, type LoadProgressListener } from '../../common/load-progress.js';
import type { HeldWeights } from '../../graph/held-weights.js';
import { startWorker } from '../start.js';
import type { RepackWriter, RepackReply } from '../repack.js';
import type { CreatedSession, DeviceWeightsHeld, HostTensor, KeyLayoutKind, RunRequest, RunResult, SessionMessage } from './protocol.js';

interface ModelSession {
  session: ort.InferenceSession;
  keyLayout: KeyLayoutKind;
  /** Set when the graph takes its index feeds as one input (graph/index-feeds.ts). */
  indexFeeds?: IndexFeedPlan;
  /** Its inputs that are device weights (known at its first run). */
  weightInputs?: string[];
}

const tensor = (t: HostTensor) => new ort.Tensor(t.type, t.data, t.dims);
const plain = (t: ort.Tensor): HostTensor => ({
  type: t.type as HostTensor['type'],
  dims: [...t.dims],
  data: (t.data as HostTensor['data']).slice(),
});
const ELEMENT_BYTES: Partial<Record<ort.Tensor.Type, number>> = {
  float32: 4,
  float16: 2,
  int32: 4,
  uint32: 4,
  int64: 8,
  uint8: 1,
  int8: 1,
};
const hostBytes = (ts: ort.Tensor[]) => ts.reduce((n, t) => n + (t.location === 'cpu' ? (t.data as ArrayBufferView).byteLength : 0), 0);

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

/** Where a `gather` graph's keys lie (model/past.ts: keySources), for its rows of past,
 * recent and new K/V end to end, in rows of head_dim values: each row's [past length, past
 * base, recent base, new base] (`kv_rows`) and [P₀, P₁, T, last row] (`kv_steps`). */
function keySourceFeeds(
  r: RunRequest,
  past: KvTensor,
  recent: KvTensor,
  rows: number[],
  ids: readonly number[],
): Record<string, ort.Tensor> {
  const [B, T] = ids as [number, number];
  const kv = past.dims[1]!;
  const [P0, P1] = [slotsOf(past), slotsOf(recent)];
  const pastRows = past.dims[0]! * kv * P0;
  const recentRows = recent.dims[0]! * kv * P1;
  const bases = new BigInt64Array(B * 4);
  for (let b = 0; b < B; b++) {
    const length = r.pastLengths[b]!;
    bases.set(
      [length, rows[b]! * kv * P0, pastRows + rows[b]! * kv * P1 - P0, pastRows + recentRows + b * kv * T - length].map(BigInt),
      4 * b,
    );
  }
  const steps = BigInt64Array.from([P0, P1, T, pastRows + recentRows + B * kv * T - 1], BigInt);
  return { kv_rows: new ort.Tensor('int64', bases, [B, 4]), kv_steps: new ort.Tensor('int64', steps, [4]) };
}

/** Free a host tensor's memory now, not at the next garbage collection: its buffer is
 * transferred into a message nobody receives, and freed with the closed channel. The
 * weights' upload makes a host copy of every weight (onnxruntime-node copies a session's
 * outputs into JS memory): left to the collector, the last ones stayed for the model's
 * life (lavapipe, 830 MiB of float32 weights: the embedding's 125 MiB after the load). */
function freeNow(t: ort.Tensor): void {
  const data = t.data as ArrayBufferView;
  if (!(data.buffer instanceof ArrayBuffer) || data.byteOffset !== 0 || data.byteLength !== data.buffer.byteLength) return;
  const { port1, port2 } = new MessageChannel();
  port1.postMessage(null, [data.buffer]);
  port1.close();
  port2.close();
}

export class SessionPasses {
  private readonly sessions = new Map<string, ModelSession>();
  /** The model's weights on the device, by the name its graphs read them as (`upload`). */
  private readonly weights = new Map<string, ort.Tensor>();
  /** The sessions that carried them up, by element type: their allocator holds them. */
  private readonly carriers = new Map<string, ort.InferenceSession>();
  /** A one-value graph on the device, read back to wait for it (`settle`). */
  private syncSession?: ort.InferenceSession;

  constructor(
    private readonly store: KvStore,
    private readonly layouts: KvLayouts,
    private readonly gather: KvGather,
  ) {}

  /** Make a session. The weights it would keep reading from onnxruntime's map of the
   * checkpoint are copied first to their private file, which is unlinked once the session
   * has mapped it (graph/held-weights.ts); then which weights files are still mapped. */
  async create(msg: Extract<SessionMessage, { op: 'create' }>, progress: LoadProgressListener = () => {}): Promise<CreatedSession> {
    const held = msg.weights?.held;
    let session: ort.InferenceSession;
    try {
      if (held) await writeHeld(msg.weights!.dir, held, threadsOf(msg.options), progress);
      progress({ step: 'session' });
      session = await ort.InferenceSession.create(msg.model, msg.options);
    } finally {
      if (held && !held.cache) fs.rmSync(held.file, { force: true });
    }
    const packed = msg.indexFeeds && msg.indexFeeds.feeds.length > 0 ? { indexFeeds: msg.indexFeeds } : {};
    this.sessions.set(msg.name, { session, keyLayout: msg.keyLayout, ...packed });
    const mapped = msg.weights && mappedFiles(msg.weights.files);
    return mapped ? { mapped } : {};
  }

  /** Put the model's weights on the device once, for every session to read (graph/
   * device-weights.ts). Each upload graph is made a CPU session, which folds its nodes as it
   * is made (as the model's session folded them before: the same bits) and is run and
   * released; a carrier session of each output's element type copies the output up into a
   * device tensor of its own — one group at a time. A device tensor lives on the allocator
   * of the session that made it (measured on lavapipe: one freed after its session was
   * released ends the process), so the carriers live as long as the weights. The held
   * weights are written first and unlinked after. */
  async upload(
    msg: Extract<SessionMessage, { op: 'upload' }>,
    progress: LoadProgressListener = () => {},
  ): Promise<CreatedSession & DeviceWeightsHeld> {
    const held = msg.weights?.held;
    try {
      if (held) await writeHeld(msg.weights!.dir, held, threadsOf(msg.foldOptions), progress);
      for (const [k, upload] of msg.uploads.entries()) {
        progress({ step: 'upload', done: k, total: msg.uploads.length, unit: 'uploads' });
        const folding = await ort.InferenceSession.create(upload.model, msg.foldOptions);
        let out: Record<string, ort.Tensor>;
        try {
          out = await folding.run({});
        } finally {
          await folding.release();
        }
        for (const name of upload.outputs) this.weights.set(name, await this.carry(out[name]!, msg));
        await this.settle(msg);
        for (const t of Object.values(out)) freeNow(t);
      }
      await this.settle(msg);
    } finally {
      if (held && !held.cache) fs.rmSync(held.file, { force: true });
    }
    const mapped = msg.weights && mappedFiles(msg.weights.files);
    return { ...(mapped && { mapped }), ...this.deviceWeights };
  }

  /** Wait for the device to finish what was sent to it: a one-value pass read back. Dawn
   * frees an upload's staging memory only some device round trips after the copy (measured
   * on lavapipe, 830 MiB of float32 weights: the load peaked at 1.74x the weights and held
   * 1.52x after it; with a round trip after each group and one more at the end, 1.55x and
   * 1.37x). */
  private async settle(msg: Extract<SessionMessage, { op: 'upload' }>): Promise<void> {
    this.syncSession ??= await ort.InferenceSession.create(msg.sync, msg.options);
    await this.syncSession.run({ x: new ort.Tensor('float32', new Float32Array(1), [1]) });
  }

  /** A host tensor carried to the device by the carrier session of its element type. */
  private async carry(t: ort.Tensor, msg: Extract<SessionMessage, { op: 'upload' }>): Promise<ort.Tensor> {
    let carrier = this.carriers.get(t.type);
    if (!carrier) {
      const model = msg.carriers[t.type];
      if (!model) throw new Error(`no carrier for ${t.type} weights`);
      carrier = await ort.InferenceSession.create(model, { ...msg.options, preferredOutputLocation: 'gpu-buffer' });
      this.carriers.set(t.type, carrier);
    }
    return (await carrier.run({ x: t })).x!;
  }

  get deviceWeights(): DeviceWeightsHeld {
    let bytes = 0;
    for (const t of this.weights.values()) bytes += t.dims.reduce((n, d) => n * d, 1) * (ELEMENT_BYTES[t.type] ?? 4);
    return { tensors: this.weights.size, bytes };
  }

  async run(r: RunRequest): Promise<RunResult> {
    const model = this.sessions.get(r.session);
    if (!model) throw new Error(`no session ${r.session}`);
    const { session } = model;
    const feeds: Record<string, ort.Tensor> = {};
    for (const [k, v] of Object.entries(r.feeds)) feeds[k] = tensor(v);
    model.weightInputs ??= session.inputNames.filter((name) => this.weights.has(name));
    for (const name of model.weightInputs) feeds[name] = this.weights.get(name)!;
    const { past, recent, rows } = await this.pastFeeds(r);
    // The pass holds what it reads until it ends: a past laid out for it is freed then unless
    // its present keeps it, and a kept past dropped meanwhile stays until the pass is done.
    const fed = [...past, ...recent];
    this.store.hold(fed);
    try {
      this.addKvFeeds(model, r, feeds, past, recent, rows);
      // What goes up with the pass besides its past: the feeds as fed (index feeds packed),
      // but for the salt, which no node reads.
      const inputBytes = hostBytes(
        Object.entries(feeds)
          .filter(([name, t]) => name !== 'shape_salt' && !fed.includes(t as KvTensor))
          .map(([, t]) => t),
      );
      const fetches = [...r.fetches];
      if (r.keepPresent) for (let i = 0; i < r.numLayers; i++) fetches.push(`new.${i}.key`, `new.${i}.value`);
      if (r.keepPresent && this.layouts.onDevice) for (let i = 0; i < r.numLayers; i++) fetches.push(`full.${i}.key`, `full.${i}.value`);
      const onDevice = this.layouts.onDevice;
      const out = await session.run(feeds, onDevice ? session.outputNames : fetches);
      const outputs: Record<string, HostTensor> = {};
      for (const name of r.fetches) outputs[name] = plain(out[name]!);
      // A session with outputs on the device runs through one IO binding that keeps every
      // output it ever bound: an output fetched once and not the next time stays bound to the
      // earlier run's tensor, which onnxruntime then takes as a preallocated output (a shape
      // error, or the next run writing into a KV we keep). So such a session fetches every
      // output every run, and frees the device ones nobody asked for.
      if (onDevice)
        for (const name of session.outputNames) if (!fetches.includes(name) && out[name]?.location === 'gpu-buffer') out[name]!.dispose();
      // The layouts' slot maps since the last pass: this pass's past (laid out by a gather
      // before it, or here) and the prefix cache's segments of the pass before.
      const moved = { inputs: inputBytes, pastKv: onDevice ? hostBytes(fed) : 0, presentKv: 0, layoutIndex: this.layouts.takeIndexBytes() };
      if (!r.keepPresent) return { outputs, moved };
      const fresh: KvTensor[] = [];
      for (let i = 0; i < r.numLayers; i++) fresh.push(out[`new.${i}.key`] as KvTensor, out[`new.${i}.value`] as KvTensor);
      moved.presentKv = onDevice ? hostBytes(fresh) : 0;
      if (onDevice) this.keepLastStep(r, out, fresh, rows);
      const parts = [past, recent].filter((p) => slotsOf(p[0]!) > 0);
      const present = this.store.keep(
        parts.length === 0
          ? { kind: 'laidOut', parts: [fresh] }
          : { kind: 'extended', parts, pastSlots: r.pastSlots, pastRows: rows, pastLengths: r.pastLengths, fresh },
      );
      return { outputs, present, moved };
    } finally {
      this.store.unhold(fed);
    }
  }

  async release(): Promise<void> {
    // Before the sessions: the last one released takes the device's context with it.
    for (const t of this.weights.values()) t.dispose();
    this.weights.clear();
    for (const carrier of this.carriers.values()) await carrier.release();
    this.carriers.clear();
    await this.syncSession?.release();
    this.syncSession = undefined;
    for (const { session } of this.sessions.values()) {
      // A profiled session writes its profile here (a no-op for the others).
      session.endProfiling();
      await session.release();
    }
    this.sessions.clear();
  }

  /** The past's tensors as `past.L.*` and `recent.L.*`, where its keys lie (per the graph's
   * key layout), the shape salt, and the index feeds packed into one input. */
  private addKvFeeds(
    model: ModelSession,
    r: RunRequest,
    feeds: Record<string, ort.Tensor>,
    past: KvTensor[],
    recent: KvTensor[],
    rows: number[],
  ): void {
    if (model.keyLayout === 'gather') Object.assign(feeds, keySourceFeeds(r, past[0]!, recent[0]!, rows, feeds.input_ids!.dims));
    else feeds.past_rows = new ort.Tensor('int64', BigInt64Array.from(rows, BigInt), [rows.length]);
    for (let i = 0; i < r.numLayers; i++) {
      feeds[`past.${i}.key`] = past[2 * i]!;
      feeds[`past.${i}.value`] = past[2 * i + 1]!;
      feeds[`recent.${i}.key`] = recent[2 * i]!;
      feeds[`recent.${i}.value`] = recent[2 * i + 1]!;
    }
    feeds.shape_salt = shapeSalt(feeds);
    const plan = model.indexFeeds;
    if (plan) {
      const packed = packIndexFeeds(plan, feeds as Record<string, Int64Feed>);
      for (const f of plan.feeds) delete feeds[f.name];
      for (const [name, t] of Object.entries(packed)) feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
    }
  }

  /** On the device, a kept pass's keys and values whole, for the next decode step. */
  private keepLastStep(r: RunRequest, out: Record<string, ort.Tensor>, fresh: KvTensor[], rows: number[]): void {
    const full: KvTensor[] = [];
    for (let i = 0; i < r.numLayers; i++) full.push(out[`full.${i}.key`] as KvTensor, out[`full.${i}.value`] as KvTensor);
    this.gather.keepLastStep(r.past, full, fresh, rows);
  }

  /** The past a pass is fed, in two parts (past, recent), and the row of it each pass row
   * continues: the kept parts themselves when they are laid out (a decode step's gathered
   * past; the distinct pasts of rows that share them, which the graph gathers per row),
   * else each pass row's past laid out once (a query block continuing the one before). */
  private async pastFeeds(r: RunRequest): Promise<{ past: KvTensor[]; recent: KvTensor[]; rows: number[] }> {
    const { type, dims } = r.emptyPast;
    const B = r.pastRows.length;
    const empty = (rows: number) =>
      Array.from(
        { length: 2 * r.numLayers },
        () => new ort.Tensor(type, type === 'float16' ? new Uint16Array(0) : new Float32Array(0), [rows, ...dims.slice(1)]) as KvTensor,
      );
    const identity = Array.from({ length: B }, (_, b) => b);
    if (r.past === undefined) return { past: empty(B), recent: empty(B), rows: identity };
    const kv = this.store.get(r.past);
    if (kv.kind === 'laidOut') {
      const rows = kv.parts[0]![0]!.dims[0]!;
      // As many rows as the pass: row b is row b (the graph reads past_rows only when the
      // past has fewer rows than the pass).
      if (rows === B && r.pastRows.every((row, b) => row === b))
        return { past: kv.parts[0]!, recent: kv.parts[1] ?? empty(B), rows: identity };
      if (rows < B) return { past: kv.parts[0]!, recent: kv.parts[1] ?? empty(rows), rows: r.pastRows };
    }
    return { past: await this.gather.layOutRows(r.past, r.pastRows), recent: empty(B), rows: identity };
  }
}

/** The held weights' private copy made (or, from the weights cache, already there), by as
 * many writers as the session has threads where it has derived tensors to make. */
async function writeHeld(dir: string, held: HeldWeights, threads: number, progress: LoadProgressListener): Promise<void> {
  if (held.cache === 'reuse') return progress({ step: 'prepare', done: held.bytes, total: held.bytes, unit: 'bytes' });
  const parts = held.pieces.some((p) => p.derived) ? Math.max(1, threads) : 1;
  await writeHeldWeights(
    dir,
    held,
    throttled('prepare', 'bytes', progress),
    parts,
    (part, advance) =>
      new Promise<void>((resolve, reject) => {
        const worker = startWorker('repack', { workerData: { dir, held, part, parts } satisfies RepackWriter });
        worker.on('message', (m: RepackReply) => ('done' in m ? resolve() : advance(m.bytes)));
        worker.on('error', (e) => reject(e));
        worker.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`a repack writer stopped (exit code ${code})`))));
      }),
  );
}

/** The threads a session runs on (its intra-op pool; 0: one per core). */
const threadsOf = (options: ort.InferenceSession.SessionOptions) => options.intraOpNumThreads || os.availableParallelism();
