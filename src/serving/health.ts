// A grpc.health.v1 client, for `ctxprobe health` (container HEALTHCHECK) and tests.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

const require = createRequire(import.meta.url);

/** grpc.health.v1 as a package definition (also what reflection lists it from). */
export function healthPackageDefinition(): protoLoader.PackageDefinition {
  const protoPath = path.join(path.dirname(require.resolve('grpc-health-check/package.json')), 'proto/health/v1/health.proto');
  return protoLoader.loadSync(protoPath, { keepCase: true, enums: String });
}

export function healthClientConstructor(): grpc.ServiceClientConstructor {
  const pkg = grpc.loadPackageDefinition(healthPackageDefinition());
  const health = (pkg.grpc as grpc.GrpcObject).health as grpc.GrpcObject;
  return (health.v1 as grpc.GrpcObject).Health as grpc.ServiceClientConstructor;
}

export interface HealthCheckOptions {
  service?: string;
  /** PEM CA that signed the server's certificate: check over TLS. */
  tlsCa?: string;
  /** PEM client certificate and key, for a server that requires mutual TLS. */
  tlsCert?: string;
  tlsKey?: string;
  /** The name the server's certificate carries, when the address is not it (127.0.0.1 in a pod). */
  serverName?: string;
  timeoutMs?: number;
}

/** The serving status the server reports, or `UNREACHABLE: <reason>`. */
export async function checkHealth(address: string, options: HealthCheckOptions = {}): Promise<string> {
  const Health = healthClientConstructor();
  const read = (f: string) => fs.readFileSync(f);
  const credentials = options.tlsCa
    ? grpc.credentials.createSsl(
        read(options.tlsCa),
        options.tlsKey ? read(options.tlsKey) : null,
        options.tlsCert ? read(options.tlsCert) : null,
      )
    : grpc.credentials.createInsecure();
  const channelOptions = options.serverName
    ? { 'grpc.ssl_target_name_override': options.serverName, 'grpc.default_authority': options.serverName }
    : {};
  const client = new Health(address, credentials, channelOptions) as unknown as grpc.Client & {
    Check(req: { service: string }, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: { status: string }) => void): void;
  };
  try {
    return await new Promise<string>((resolve) =>
      client.Check({ service: options.service ?? '' }, { deadline: Date.now() + (options.timeoutMs ?? 3000) }, (err, res) =>
        resolve(err ? `UNREACHABLE: ${err.details || err.message}` : res!.status),
      ),
    );
  } finally {
    client.close();
  }
}
