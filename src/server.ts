// The gRPC server: binds, serves the Scoring service, shuts down cleanly.
import * as grpc from '@grpc/grpc-js';
import { loadPackage } from './grpc/proto.js';
import { scoringService } from './grpc/service.js';
import type { LoadedModel } from './repository.js';

export interface ServerOptions {
  models: LoadedModel[];
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  maxMessageBytes?: number;
  log?: (line: Record<string, unknown>) => void;
}

export interface RunningServer {
  port: number;
  address: string;
  shutdown(): Promise<void>;
}

export async function startServer(options: ServerOptions): Promise<RunningServer> {
  if (options.models.length === 0) throw new Error('no models to serve');
  const maxBytes = options.maxMessageBytes ?? 64 * 1024 * 1024;
  const server = new grpc.Server({
    'grpc.max_receive_message_length': maxBytes,
    'grpc.max_send_message_length': maxBytes,
  });
  const { v1 } = loadPackage();
  server.addService(v1.Scoring.service, scoringService({ models: options.models, log: options.log }));
  const host = options.host ?? '127.0.0.1';
  const address = `${host.includes(':') ? `[${host}]` : host}:${options.port ?? 50051}`;
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (err, bound) => (err ? reject(err) : resolve(bound))),
  );
  return {
    port,
    address: `${host}:${port}`,
    shutdown: () => new Promise<void>((resolve) => server.tryShutdown(() => resolve())),
  };
}
