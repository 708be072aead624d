// The health port's worker (health-port.ts): grpc.health.v1 on a port of its own, fed
// the wanted statuses and a heartbeat by the main thread; NOT_SERVING for every service
// while the heartbeat is stale.
import { parentPort, workerData } from 'node:worker_threads';
import * as grpc from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';

export type Status = 'SERVING' | 'NOT_SERVING';

export interface HealthWorkerData {
  address: string;
  statuses: Record<string, Status>;
  staleMs: number;
}

/** From the main thread: a heartbeat, a wanted status. */
export interface HealthMessage {
  beat?: true;
  status?: { service: string; value: Status };
}

/** To the main thread, once: the bound port, or why binding failed. */
export type HealthReply = { port: number } | { error: string };

const data = workerData as HealthWorkerData;
const port = parentPort!;
const wanted = new Map(Object.entries(data.statuses));
const health = new HealthImplementation(data.statuses);
let lastBeat = Date.now();
let stale = false;
const apply = () => {
  for (const [service, status] of wanted) health.setStatus(service, stale ? 'NOT_SERVING' : status);
};
port.on('message', (msg: HealthMessage) => {
  if (msg.beat) lastBeat = Date.now();
  if (msg.status) {
    wanted.set(msg.status.service, msg.status.value);
    apply();
  }
});
setInterval(() => {
  const nowStale = Date.now() - lastBeat > data.staleMs;
  if (nowStale !== stale) {
    stale = nowStale;
    apply();
  }
}, 100);
const server = new grpc.Server();
health.addToServer(server);
server.bindAsync(data.address, grpc.ServerCredentials.createInsecure(), (err, bound) =>
  port.postMessage((err ? { error: String(err.message) } : { port: bound }) satisfies HealthReply),
);
