// TLS (server and mutual) and bearer tokens, end to end on loopback with certificates
// generated for the test by openssl. Health and metrics stay open for probes.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPackage } from '../src/grpc/proto.js';
import { healthClientConstructor } from '../src/serving/health.js';
import { loadModel, type LoadedModel } from '../src/serving/repository.js';
import { CtxprobeServer } from '../src/server.js';
import { loadTokens } from '../src/serving/security.js';
import { ConfigError } from '../src/common/errors.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { makeCertificates } from './certs.js';
import { scrape } from './helpers.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const TOKEN = 'test-token-0123456789abcdef';

let certs: ReturnType<typeof makeCertificates>;
let model: LoadedModel;
beforeAll(async () => {
  certs = makeCertificates(tempDir('certs'));
  model = await loadModel({ name: 'm', path: makeFixture(FAMILY_FIXTURES.llama!).dir, threads: 1 });
});
afterAll(async () => model?.engine.release());

async function serve(tls: { clientCa?: string }) {
  const server = await CtxprobeServer.start({
    port: 0,
    metricsPort: 0,
    tls: { cert: certs.serverCert, key: certs.serverKey, ...tls },
    authTokens: [TOKEN],
  });
  server.addModel(model);
  server.setServing();
  return server;
}

function credentials(ca: string, client = false) {
  const read = (f: string) => fs.readFileSync(f);
  return client
    ? grpc.credentials.createSsl(read(ca), read(certs.clientKey), read(certs.clientCert))
    : grpc.credentials.createSsl(read(ca));
}

function listModels(port: number, creds: grpc.ChannelCredentials, token?: string): Promise<any> {
  const { v1 } = loadPackage();
  const client: any = new v1.Scoring(`localhost:${port}`, creds);
  const md = new grpc.Metadata();
  if (token) md.set('authorization', `Bearer ${token}`);
  return new Promise((resolve, reject) =>
    client.ListModels({}, md, { deadline: Date.now() + 5000 }, (err: grpc.ServiceError | null, res: any) => {
      client.close();
      if (err) reject(err);
      else resolve(res);
    }),
  );
}

describe('TLS with bearer tokens', () => {
  let server: CtxprobeServer;
  beforeAll(async () => {
    server = await serve({});
  });
  afterAll(async () => server?.drain());

  it('answers a call with the right CA and token', async () => {
    const res = await listModels(server.port, credentials(certs.ca), TOKEN);
    expect(res.models[0].name).toBe('m');
  });

  it('refuses a call without a token, or with a wrong one, as UNAUTHENTICATED, and counts it in /metrics', async () => {
    const series = 'ctxprobe_requests_total{method="ListModels",code="UNAUTHENTICATED"}';
    const before = (await scrape(server.metricsPort!)).get(series) ?? 0;
    for (const token of [undefined, 'wrong-token-0123456789abcdef']) {
      const err = await listModels(server.port, credentials(certs.ca), token).catch((e) => e);
      expect(err.code).toBe(grpc.status.UNAUTHENTICATED);
      expect(err.details).toMatch(/authorization: a valid "Bearer <token>" is required/);
    }
    expect((await scrape(server.metricsPort!)).get(series)! - before).toBe(2);
  });

  it('fails the handshake for a client that trusts another CA', async () => {
    const err = await listModels(server.port, credentials(certs.otherCa), TOKEN).catch((e) => e);
    expect(err.code).toBe(grpc.status.UNAVAILABLE);
  });

  it('keeps health answering without a token, and ctxprobe health uses it', async () => {
    const Health = healthClientConstructor();
    const health: any = new Health(`localhost:${server.port}`, credentials(certs.ca));
    const res = await new Promise<any>((resolve, reject) =>
      health.Check({ service: '' }, (e: any, r: any) => (e ? reject(e) : resolve(r))),
    );
    health.close();
    expect(res.status).toBe('SERVING');
    const { stdout } = await promisify(execFile)(process.execPath, [
      path.join(root, 'bin/ctxprobe.js'),
      'health',
      '--address',
      `localhost:${server.port}`,
      '--tls-ca',
      certs.ca,
    ]);
    expect(stdout.trim()).toBe('SERVING');
    const metrics = await fetch(`http://127.0.0.1:${server.metricsPort}/metrics`);
    expect(metrics.status).toBe(200);
  });
});

describe('mutual TLS', () => {
  let server: CtxprobeServer;
  beforeAll(async () => {
    server = await serve({ clientCa: certs.ca });
  });
  afterAll(async () => server?.drain());

  it('accepts a client certificate signed by the client CA and refuses a client without one', async () => {
    const res = await listModels(server.port, credentials(certs.ca, true), TOKEN);
    expect(res.models).toHaveLength(1);
    const err = await listModels(server.port, credentials(certs.ca, false), TOKEN).catch((e) => e);
    expect(err.code).toBe(grpc.status.UNAVAILABLE);
  });
});

describe('token loading', () => {
  it('reads one token per line, skipping comments, and refuses short or missing tokens', () => {
    const file = path.join(tempDir('tokens'), 'tokens');
    fs.writeFileSync(file, `# rotated 2026-11\n${TOKEN}\n\nsecond-token-abcdefghijklmnop\n`);
    expect(loadTokens({ file })).toEqual([TOKEN, 'second-token-abcdefghijklmnop']);
    expect(() => loadTokens({ value: 'short' })).toThrow(/at least 16 characters/);
    expect(() => loadTokens({ file: '/nonexistent/tokens' })).toThrow(ConfigError);
    expect(loadTokens({})).toEqual([]);
  });
});
