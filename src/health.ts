// A grpc.health.v1 client, for `ctxprobe health` (container HEALTHCHECK) and tests.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

const require = createRequire(import.meta.url);

export function healthClientConstructor(): grpc.ServiceClientConstructor {
  const protoPath = path.join(path.dirname(require.resolve('grpc-health-check/package.json')), 'proto/health/v1/health.proto');
  const pkg = grpc.loadPackageDefinition(protoLoader.loadSync(protoPath, { keepCase: true, enums: String })) as any;
  return pkg.grpc.health.v1.Health;
}

/** The serving status the server reports, or `UNREACHABLE: <reason>`. */
export async function checkHealth(
  address: string,
  options: { service?: string; tlsCa?: string; timeoutMs?: number } = {},
): Promise<string> {
  const Health = healthClientConstructor();
  const credentials = options.tlsCa ? grpc.credentials.createSsl(fs.readFileSync(options.tlsCa)) : grpc.credentials.createInsecure();
  const client: any = new Health(address, credentials);
  try {
    return await new Promise<string>((resolve) =>
      client.Check(
        { service: options.service ?? '' },
        { deadline: Date.now() + (options.timeoutMs ?? 3000) },
        (err: grpc.ServiceError | null, res: any) => resolve(err ? `UNREACHABLE: ${err.details || err.message}` : res.status),
      ),
    );
  } finally {
    client.close();
  }
}
