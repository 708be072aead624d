// onnxruntime sessions in a worker thread. onnxruntime-node 1.30's `run()` returns a
// promise but runs the whole pass on the calling thread (it only defers the native call
// with setImmediate; microsoft/onnxruntime#19611, fix pending in #28646): on the main
// thread every pass would freeze health checks, all I/O and /metrics for its duration
// (measured: a 4096-token pass held the event loop 1.1–1.5 s). Here the main thread
// builds graphs and feed arrays; the worker owns the sessions and runs them.
//
// The KV of a prefix pass never crosses threads: the worker keeps it under a handle that
// later passes name as their past, until `dropPast`.
import { Worker } from 'node:worker_threads';
import { UnavailableError } from './errors.js';

// onnxruntime 1.30 starts Microsoft's telemetry client when it creates its environment (the
// first session): it reads /proc/self/cmdline and matches it with std::regex, whose
// recursive matcher takes ~100 bytes of stack per character. A worker thread's stack is
// 4 MiB: a command line of ~15,000 characters in all (six 2,760-character chunks) ended
// in SIGSEGV with nothing printed; the main thread's 8 MiB went at ~100k. The client also
// writes /tmp/mat-debug-PID.log and ~/.cache/Microsoft/DeveloperTools/. The variable is
// read from the process environment (which the worker shares) when the environment is
// created, so it is set here, before any worker exists; a user cannot turn it back on.
process.env.ORT_DISABLE_TELEMETRY = '1';

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
  numLayers: number;
  /** Keep this pass's `present.L.key/value` under a new handle. */
  keepPresent?: boolean;
  /** The empty past's shape: [1, kv_heads, 0, head_dim], in the KV dtype. */
  emptyPast: { type: 'float32' | 'float16'; dims: number[] };
}

export interface RunResult {
  outputs: Record<string, HostTensor>;
  present?: number;
}

const WORKER_SOURCE = (ort: string) => `
import { parentPort } from 'node:worker_threads';
import ortModule from ${JSON.stringify(ort)};
const ort = ortModule.default ?? ortModule;
const sessions = new Map();
const pasts = new Map();
let nextHandle = 1;
let empty;
const tensor = (t) => new ort.Tensor(t.type, t.data, t.dims);
const plain = (t) => ({ type: t.type, dims: [...t.dims], data: t.data.slice() });
// onnxruntime caches a memory pattern per set of input shapes, keyed by an XOR of every
// input dim, so unrelated passes collide (a 1024-token pass after 1024 cached has the key of
// a 4 × 2048-token probe pass; a probe input of [B, S] cancels key_positions' S) and then
// reuse a pattern that does not fit: every tensor falls back to its own allocation
// (measured: 1100 ms instead of 700 for that pass, every time). The graphs take one more
// input, unread, whose length is a hash of all the other shapes: it moves the XOR key.
function shapeSalt(feeds) {
  let h = 2166136261;
  for (const name of Object.keys(feeds).sort()) {
    for (const c of name) h = Math.imul(h ^ c.charCodeAt(0), 16777619);
    for (const d of feeds[name].dims) h = Math.imul(h ^ (d + 0x9e37), 16777619);
  }
  const length = 1 + ((h >>> 0) % 65521);
  return new ort.Tensor('bool', new Uint8Array(length), [length]);
}
async function handle(msg) {
  switch (msg.op) {
    case 'create': {
      sessions.set(msg.name, await ort.InferenceSession.create(msg.model, msg.options));
      return {};
    }
    case 'run': {
      const r = msg.run;
      const session = sessions.get(r.session);
      const feeds = {};
      for (const [k, v] of Object.entries(r.feeds)) feeds[k] = tensor(v);
      const past = r.past !== undefined ? pasts.get(r.past) : undefined;
      if (r.past !== undefined && !past) throw new Error('past KV handle ' + r.past + ' is gone');
      if (!past) {
        const data = r.emptyPast.type === 'float16' ? new Uint16Array(0) : new Float32Array(0);
        empty ??= new ort.Tensor(r.emptyPast.type, data, r.emptyPast.dims);
      }
      for (let i = 0; i < r.numLayers; i++) {
        feeds['past.' + i + '.key'] = past ? past[2 * i] : empty;
        feeds['past.' + i + '.value'] = past ? past[2 * i + 1] : empty;
      }
      feeds.shape_salt = shapeSalt(feeds);
      const fetches = [...r.fetches];
      if (r.keepPresent) for (let i = 0; i < r.numLayers; i++) fetches.push('present.' + i + '.key', 'present.' + i + '.value');
      const out = await session.run(feeds, fetches);
      const outputs = {};
      for (const name of r.fetches) outputs[name] = plain(out[name]);
      let present;
      if (r.keepPresent) {
        present = nextHandle++;
        const kept = [];
        for (let i = 0; i < r.numLayers; i++) kept.push(out['present.' + i + '.key'], out['present.' + i + '.value']);
        pasts.set(present, kept);
      }
      return { outputs, present };
    }
    case 'gather': {
      // rows[b]: pieces {handle, row, offset, count} laid end to end, right-padded to length.
      const B = msg.rows.length, P = msg.length;
      const first = msg.rows.flat()[0];
      const proto = pasts.get(first.handle);
      if (!proto) throw new Error('past KV handle ' + first.handle + ' is gone');
      const kept = [];
      for (let i = 0; i < proto.length; i++) {
        const [, H, , D] = proto[i].dims;
        const data = new proto[i].data.constructor(B * H * P * D);
        msg.rows.forEach((pieces, b) => {
          let at = 0;
          for (const p of pieces) {
            const kv = pasts.get(p.handle);
            if (!kv) throw new Error('past KV handle ' + p.handle + ' is gone');
            const src = kv[i];
            const Ps = src.dims[2];
            for (let h = 0; h < H; h++) {
              const from = ((p.row * H + h) * Ps + p.offset) * D;
              data.set(src.data.subarray(from, from + p.count * D), ((b * H + h) * P + at) * D);
            }
            at += p.count;
          }
        });
        kept.push(new ort.Tensor(proto[i].type, data, [B, H, P, D]));
      }
      const handle = nextHandle++;
      pasts.set(handle, kept);
      return { handle };
    }
    case 'dropPast':
      pasts.delete(msg.handle);
      return {};
    case 'keptPasts':
      return { count: pasts.size };
    case 'exitForTest':
      // Only CTXPROBE_TEST_HOOKS sends this: the thread ends as a crash would end it.
      process.exit(3);
    case 'release':
      for (const s of sessions.values()) await s.release();
      sessions.clear();
      pasts.clear();
      return {};
  }
  throw new Error('unknown op ' + msg.op);
}
parentPort.on('message', (msg) => {
  handle(msg).then(
    (result) => {
      const transfer = [];
      for (const t of Object.values(result.outputs ?? {})) transfer.push(t.data.buffer);
      parentPort.postMessage({ id: msg.id, result }, transfer);
    },
    (e) => parentPort.postMessage({ id: msg.id, error: String((e && e.message) || e) }),
  );
});
`;

export class SessionHost {
  private readonly worker: Worker;
  private readonly pending = new Map<number, { resolve(v: any): void; reject(e: Error): void }>();
  private nextId = 0;
  /** Set when the worker has gone: later calls fail at once instead of waiting forever. */
  private gone?: Error;
  private closing = false;
  private readonly lostListeners: ((err: Error) => void)[] = [];

  constructor() {
    const source = WORKER_SOURCE(import.meta.resolve('onnxruntime-node'));
    this.worker = new Worker(new URL(`data:text/javascript,${encodeURIComponent(source)}`));
    this.worker.on('message', (msg: { id: number; result?: unknown; error?: string }) => {
      const p = this.pending.get(msg.id);
      this.pending.delete(msg.id);
      if (msg.error !== undefined) p?.reject(new Error(msg.error));
      else p?.resolve(msg.result);
    });
    const fail = (err: Error) => {
      const first = this.gone === undefined;
      this.gone ??= err;
      for (const p of this.pending.values()) p.reject(this.gone);
      this.pending.clear();
      if (first && !this.closing) for (const listener of this.lostListeners) listener(this.gone);
    };
    this.worker.on('error', (e) => fail(new UnavailableError(`the session host stopped (${e.message}); retry on another replica`)));
    this.worker.on('exit', (code) => fail(new UnavailableError(`the session host stopped (exit code ${code}); retry on another replica`)));
    // An idle host must not keep the process alive; pending calls hold it through their promises.
    this.worker.unref();
  }

  private call<T>(msg: Record<string, unknown>, transfer: ArrayBuffer[] = []): Promise<T> {
    if (this.gone) return Promise.reject(this.gone);
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      if (this.pending.size === 1) this.worker.ref();
      this.worker.postMessage({ ...msg, id }, transfer);
    }).finally(() => {
      if (this.pending.size === 0) this.worker.unref();
    });
  }

  /** Create a session named `name` from a serialized model (session options as onnxruntime takes them). */
  create(name: string, model: Uint8Array, options: Record<string, unknown>): Promise<void> {
    return this.call({ op: 'create', name, model, options });
  }

  run(run: RunRequest): Promise<RunResult> {
    const transfer = Object.values(run.feeds).map((t) => t.data.buffer as ArrayBuffer);
    return this.call({ op: 'run', run }, transfer);
  }

  /** Lay pieces of kept KV end to end, one row per list, right-padded to `length`, and
   * keep the result under a new handle. */
  async gather(rows: { handle: number; row: number; offset: number; count: number }[][], length: number): Promise<number> {
    return (await this.call<{ handle: number }>({ op: 'gather', rows, length })).handle;
  }

  /** Call `listener` once if the worker ends without `close` (a crash, an out-of-memory
   * kill of the thread): every later call fails, so the process is of no use any more. */
  onLost(listener: (err: Error) => void): void {
    this.lostListeners.push(listener);
  }

  /** How many KVs the worker keeps under handles (what leaks show as). */
  async keptPasts(): Promise<number> {
    return (await this.call<{ count: number }>({ op: 'keptPasts' })).count;
  }

  /** Test hook: end the worker as a crash would. */
  exitForTest(): void {
    void this.call({ op: 'exitForTest' }).catch(() => {});
  }

  dropPast(handle: number): void {
    void this.call({ op: 'dropPast', handle }).catch(() => {});
  }

  async close(): Promise<void> {
    this.closing = true;
    await this.call({ op: 'release' }).catch(() => {});
    await this.worker.terminate();
  }
}
