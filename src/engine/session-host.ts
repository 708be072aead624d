// onnxruntime sessions in a worker thread. onnxruntime-node 1.30's `run()` returns a
// promise but runs the whole pass on the calling thread (it only defers the native call
// with setImmediate; microsoft/onnxruntime#19611, fix pending in #28646): on the main
// thread every pass would freeze health checks, all I/O and /metrics for its duration
// (measured: a 4096-token pass held the event loop 1.1–1.5 s). Here the main thread
// builds graphs and feed arrays; the worker owns the sessions and runs them.
//
// The KV of a prefix pass never crosses threads: the worker keeps it under a handle that
// later passes name as their past, until `dropPast`.
import type { Worker } from 'node:worker_threads';
import { UnavailableError } from '../common/errors.js';
import { startWorker } from '../workers/start.js';
import type { IndexFeedPlan } from '../graph/index-feeds.js';
import type {
  CreatedSession,
  DeviceKv,
  DeviceWeightsHeld,
  KeyLayoutKind,
  KvPiece,
  RunRequest,
  RunResult,
  SessionMessage,
  SessionReply,
  SessionThreadData,
  SessionWeights,
} from '../workers/session/protocol.js';
import type { LoadProgressListener } from '../common/load-progress.js';

// onnxruntime 1.30 starts Microsoft's telemetry client when it creates its environment (the
// first session): it reads /proc/self/cmdline and matches it with std::regex, whose
// recursive matcher takes ~100 bytes of stack per character. A worker thread's stack is
// 4 MiB: a command line of ~15,000 characters in all (six 2,760-character chunks) ended
// in SIGSEGV with nothing printed; the main thread's 8 MiB went at ~100k. The client also
// writes /tmp/mat-debug-PID.log and ~/.cache/Microsoft/DeveloperTools/. The variable is
// read from the process environment (which the worker shares) when the environment is
// created, so it is set here, before any worker exists; a user cannot turn it back on.
process.env.ORT_DISABLE_TELEMETRY = '1';

export type { HostTensor, KvPiece, RunRequest, RunResult } from '../workers/session/protocol.js';

/** One lock for work on a shared device across every session thread of the process (session.ts). */
const DEVICE_LOCK = new SharedArrayBuffer(4);

export class SessionHost {
  private readonly worker: Worker;
  private readonly pending = new Map<number, { resolve(v: any): void; reject(e: Error): void; progress?: LoadProgressListener }>();
  private nextId = 0;
  /** Set when the worker has gone: later calls fail at once instead of waiting forever. */
  private gone?: Error;
  private closing = false;
  private readonly lostListeners: ((err: Error) => void)[] = [];

  /** `deviceKv`: the thread keeps KV on the device and lays it out with these graphs;
   * `sharedDeviceLock`: its work takes the process's one lock for the device. */
  constructor(options: { deviceKv?: DeviceKv; sharedDeviceLock?: boolean } = {}) {
    const workerData: SessionThreadData = {
      ...(options.deviceKv ? { deviceKv: options.deviceKv } : {}),
      ...(options.sharedDeviceLock ? { deviceLock: DEVICE_LOCK } : {}),
    };
    this.worker = startWorker('session', { workerData });
    this.worker.on('message', (msg: SessionReply) => {
      const p = this.pending.get(msg.id);
      if ('progress' in msg) return p?.progress?.(msg.progress);
      this.pending.delete(msg.id);
      if ('error' in msg) p?.reject(new Error(msg.error));
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

  private call<T>(msg: SessionMessage, transfer: ArrayBuffer[] = [], progress?: LoadProgressListener): Promise<T> {
    if (this.gone) return Promise.reject(this.gone);
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve, reject, ...(progress && { progress }) });
      if (this.pending.size === 1) this.worker.ref();
      this.worker.postMessage({ ...msg, id }, transfer);
    }).finally(() => {
      if (this.pending.size === 0) this.worker.unref();
    });
  }

  /** Create a session named `name` from a serialized model (session options as onnxruntime
   * takes them), telling the thread what the graph reads: where its keys lie, and the index
   * feeds it takes as one input; and the weights files, with the weights the thread reads
   * into memory of its own. Answers which weights files are still mapped once it is made. */
  create(
    name: string,
    model: Uint8Array,
    options: Extract<SessionMessage, { op: 'create' }>['options'],
    reads: { keyLayout: KeyLayoutKind; indexFeeds?: IndexFeedPlan; weights?: SessionWeights },
    progress?: LoadProgressListener,
  ): Promise<CreatedSession> {
    return this.call({ op: 'create', name, model, options, ...reads }, [], progress);
  }

  /** Put the model's weights on the device once (graph/device-weights.ts), after the
   * model's session is made; answers what the device holds, and which weights files are
   * still mapped. */
  upload(
    uploads: Extract<SessionMessage, { op: 'upload' }>['uploads'],
    how: Pick<Extract<SessionMessage, { op: 'upload' }>, 'foldOptions' | 'options' | 'carriers' | 'sync'>,
    weights: SessionWeights,
    progress?: LoadProgressListener,
  ): Promise<CreatedSession & DeviceWeightsHeld> {
    return this.call({ op: 'upload', uploads, ...how, weights }, [], progress);
  }

  /** The weights the device holds for every session of the model. */
  deviceWeights(): Promise<DeviceWeightsHeld> {
    return this.call({ op: 'deviceWeights' });
  }

  run(run: RunRequest): Promise<RunResult> {
    const transfer = Object.values(run.feeds).map((t) => t.data.buffer as ArrayBuffer);
    return this.call({ op: 'run', run }, transfer);
  }

  /** Lay pieces of kept KV end to end, one row per list, right-padded to `length`, and
   * keep the result under a new handle. */
  async gather(rows: KvPiece[][], length: number): Promise<number> {
    return (await this.call<{ handle: number }>({ op: 'gather', rows, length })).handle;
  }

  /** Several layouts in one message (a pass's rows going into the prefix cache). */
  async gatherEach(layouts: { rows: KvPiece[][]; length: number }[]): Promise<number[]> {
    return (await this.call<{ handles: number[] }>({ op: 'gatherEach', layouts })).handles;
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

  /** Tensors of kept KV the worker holds (on a GPU, device buffers not yet freed). */
  async keptTensors(): Promise<number> {
    return (await this.call<{ count: number }>({ op: 'keptTensors' })).count;
  }

  /** KV bytes the worker has copied into layouts (a pass's past, a cache segment). */
  async laidOutBytes(): Promise<number> {
    return (await this.call<{ bytes: number }>({ op: 'laidOutBytes' })).bytes;
  }

  /** Test hook: KV layout graph runs since the thread started (on the device). */
  async layoutRuns(): Promise<number> {
    return (await this.call<{ runs: number }>({ op: 'laidOutBytes' })).runs;
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
