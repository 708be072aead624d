// grpc.health.v1 on a port of its own, served from a worker thread: a health check never
// queues behind a burst of calls on the main event loop (measured under 200 simultaneous
// clients: main-port health waited 160-210 ms), and, plaintext and health-only, it is
// what Kubernetes' own gRPC probes can reach (they take no TLS parameters).
//
// It must not lie about a frozen server: the main thread sends a heartbeat every 250 ms,
// and while none has come for `staleMs` every service reports NOT_SERVING.
import type { Worker } from 'node:worker_threads';
import { startWorker } from '../workers/start.js';
import type { HealthMessage, HealthReply, HealthWorkerData } from '../workers/health.js';

export interface HealthPortOptions {
  host: string;
  port: number;
  statuses: Record<string, 'SERVING' | 'NOT_SERVING'>;
  /** Report NOT_SERVING once the main thread has been silent this long (default 2000 ms). */
  staleMs?: number;
}

export class HealthPort {
  private constructor(
    private readonly worker: Worker,
    private readonly beat: NodeJS.Timeout,
    readonly port: number,
  ) {}

  static async start(options: HealthPortOptions): Promise<HealthPort> {
    const host = options.host.includes(':') ? `[${options.host}]` : options.host;
    const workerData: HealthWorkerData = { address: `${host}:${options.port}`, statuses: options.statuses, staleMs: options.staleMs ?? 2000 };
    const worker = startWorker('health', { workerData });
    const port = await new Promise<number>((resolve, reject) => {
      worker.once('message', (msg: HealthReply) => ('error' in msg ? reject(new Error(`health port: ${msg.error}`)) : resolve(msg.port)));
      worker.once('error', reject);
    });
    const beat = setInterval(() => worker.postMessage({ beat: true } satisfies HealthMessage), 250);
    beat.unref();
    return new HealthPort(worker, beat, port);
  }

  setStatus(service: string, value: 'SERVING' | 'NOT_SERVING'): void {
    this.worker.postMessage({ status: { service, value } } satisfies HealthMessage);
  }

  async close(): Promise<void> {
    clearInterval(this.beat);
    await this.worker.terminate();
  }
}
