// The session worker (engine/session-host.ts): owns the model's onnxruntime sessions and the
// KV kept between passes, and runs passes off the main thread (onnxruntime-node's `run()`
// runs the whole pass on the calling thread). This file is its dispatcher: each message
// (session/protocol.ts) goes to the part that answers it —
//   session/passes.ts   the sessions and their passes
//   session/kv-store.ts the KV kept under handles, and who holds each tensor
//   session/gather.ts   pasts made of kept pieces
//   session/layouts*.ts laying KV out, on the host or on the device (chosen as the thread starts)
// — one at a time under the device's lock where the provider shares one.
import { parentPort, workerData } from 'node:worker_threads';
import { KvGather } from './session/gather.js';
import { KvStore } from './session/kv-store.js';
import { HostLayouts, type KvLayouts } from './session/layouts.js';
import { DeviceLayouts } from './session/layouts-device.js';
import { SessionPasses } from './session/passes.js';
import type { RunResult, SessionMessage, SessionReply, SessionThreadData } from './session/protocol.js';
import type { LoadProgress } from '../common/load-progress.js';

const data = (workerData ?? {}) as SessionThreadData;
const store = new KvStore();
const layouts: KvLayouts = data.deviceKv ? new DeviceLayouts(data.deviceKv, store) : new HostLayouts(store);
const gather = new KvGather(store, layouts);
const passes = new SessionPasses(store, layouts, gather);

async function handle(msg: SessionMessage & { id: number }): Promise<unknown> {
  // A create or upload tells how far it is while it runs (a load's progress).
  const progress = (p: LoadProgress) => port.postMessage({ id: msg.id, progress: p } satisfies SessionReply);
  switch (msg.op) {
    case 'create':
      return passes.create(msg, progress);
    case 'upload':
      return passes.upload(msg, progress);
    case 'deviceWeights':
      return passes.deviceWeights;
    case 'run':
      return passes.run(msg.run);
    case 'gather':
      return gather.gather(msg.rows, msg.length);
    case 'gatherEach':
      return { handles: await gather.gatherEach(msg.layouts) };
    case 'dropPast':
      store.drop(msg.handle);
      return {};
    case 'keptPasts':
      return { count: store.size };
    case 'laidOutBytes':
      return { bytes: layouts.laidOutBytes, runs: layouts.layoutRuns };
    case 'keptTensors':
      return { count: store.tensors };
    case 'release':
      gather.forget();
      store.clear();
      await passes.release();
      await layouts.release();
      return {};
    case 'exitForTest':
      // Only CTXPROBE_TEST_HOOKS sends this: the thread ends as a crash would end it.
      process.exit(3);
  }
}

/** The device's lock, shared by every session thread of the process (a SharedArrayBuffer
 * from session-host.ts): work from two threads at once breaks Dawn's device
 * (onnxruntime#32561; measured here: two models on --device webgpu in one process,
 * "CommandEncoder is already finished" then std::bad_alloc). A thread takes its messages
 * one at a time, each under the lock. */
class DeviceLock {
  private readonly word: Int32Array;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(buffer: SharedArrayBuffer) {
    this.word = new Int32Array(buffer);
  }

  /** `work` after every earlier message's, holding the lock while it runs. */
  serial<T>(work: () => Promise<T>): Promise<T> {
    const done = this.queue.then(() => this.locked(work));
    this.queue = done.catch(() => {});
    return done;
  }

  private async locked<T>(work: () => Promise<T>): Promise<T> {
    while (Atomics.compareExchange(this.word, 0, 0, 1) !== 0) Atomics.wait(this.word, 0, 1, 100);
    try {
      return await work();
    } finally {
      Atomics.store(this.word, 0, 0);
      Atomics.notify(this.word, 0, 1);
    }
  }
}

const lock = data.deviceLock ? new DeviceLock(data.deviceLock) : undefined;
const dispatch = (msg: SessionMessage & { id: number }) => (lock ? lock.serial(() => handle(msg)) : handle(msg));

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
