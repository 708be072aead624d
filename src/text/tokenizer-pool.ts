// Tokenisation off the event loop: worker threads that each hold the model's tokenizer.
// @huggingface/tokenizers is pure JavaScript and takes ~0.55 s per MiB of text here
// (measured: 1 MiB → 0.57 s, 2 MiB → 1.16 s), so on the main thread one large request
// would hold health checks and every other call for seconds.
import type { Worker } from 'node:worker_threads';
import { startWorker } from '../workers/start.js';
import type { EncodeMessage, EncodeReply } from '../workers/tokenizer.js';

interface Pending {
  resolve(ids: number[]): void;
  reject(err: Error): void;
}

export class TokenizerPool {
  private readonly workers: { worker: Worker; pending: Map<number, Pending> }[] = [];
  private nextId = 0;

  constructor(json: unknown, config: unknown, size: number) {
    for (let i = 0; i < size; i++) {
      const worker = startWorker('tokenizer', { workerData: { json, config } });
      const pending = new Map<number, Pending>();
      worker.on('message', (msg: EncodeReply) => {
        const p = pending.get(msg.id);
        pending.delete(msg.id);
        if ('error' in msg) p?.reject(new Error(`tokenizer: ${msg.error}`));
        else p?.resolve(Array.from(msg.ids));
      });
      // A worker that dies fails what it had and leaves the pool; with none left,
      // encode fails at once rather than waiting forever.
      const fail = (err: Error) => {
        for (const p of pending.values()) p.reject(err);
        pending.clear();
        const at = this.workers.findIndex((w) => w.worker === worker);
        if (at >= 0) this.workers.splice(at, 1);
      };
      worker.on('error', fail);
      worker.on('exit', (code) => fail(new Error(`tokenizer worker stopped (exit code ${code})`)));
      // Idle workers must not keep a process alive.
      worker.unref();
      this.workers.push({ worker, pending });
    }
  }

  /** Token ids of `text`, from the least busy worker. */
  encode(text: string, addSpecialTokens: boolean): Promise<number[]> {
    if (this.workers.length === 0) return Promise.reject(new Error('tokenizer: every worker has stopped'));
    const w = this.workers.reduce((a, b) => (b.pending.size < a.pending.size ? b : a));
    const id = this.nextId++;
    // An encoding under way holds the process (an idle worker does not): a process with
    // nothing else to wait on (a one-off command) exited before its text was encoded.
    return new Promise<number[]>((resolve, reject) => {
      w.pending.set(id, { resolve, reject });
      if (w.pending.size === 1) w.worker.ref();
      w.worker.postMessage({ id, text, addSpecialTokens } satisfies EncodeMessage);
    }).finally(() => {
      if (w.pending.size === 0) w.worker.unref();
    });
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.worker.terminate()));
  }
}
