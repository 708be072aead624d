// Security the way users set it: the real `ctxprobe serve` with each documented flag and
// environment variable, against both ports. Every setting fails closed: a partial or
// contradictory one stops the start with a message, it never serves open.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPackage } from '../src/grpc/proto.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { makeCertificates } from './certs.js';
import { ROOT, serveCli, type Served } from './cli-serve.js';

const TOKEN = 'cli-token-0123456789abcdef';
let certs: ReturnType<typeof makeCertificates>;
let modelDir: string;
let secrets: string;
beforeAll(() => {
  certs = makeCertificates(tempDir('cli-certs'));
  modelDir = makeFixture(FAMILY_FIXTURES.llama!).dir;
  secrets = tempDir('cli-secrets');
  fs.writeFileSync(path.join(secrets, 'tokens'), `# rotation: old then new\n${TOKEN}\n`);
});

function listModels(port: number, creds = grpc.credentials.createInsecure(), token?: string, host = '127.0.0.1'): Promise<any> {
  const { v1 } = loadPackage();
  const client = new v1.Scoring(`${host}:${port}`, creds);
  const md = new grpc.Metadata();
  if (token) md.set('authorization', `Bearer ${token}`);
  return new Promise((resolve, reject) =>
    client.ListModels({}, md, { deadline: Date.now() + 5000 }, (err, res) => {
      client.close();
      if (err) reject(err);
      else resolve(res);
    }),
  );
}

/** GET over HTTPS with the test CA (and a client certificate when given): status code,
 * or the handshake error's code. */
function httpsGet(port: number, urlPath: string, client?: { cert: string; key: string }, token?: string): Promise<number | string> {
  return new Promise((resolve) => {
    const req = https.request(
      {
        host: '127.0.0.1',
        servername: 'localhost',
        port,
        path: urlPath,
        ca: fs.readFileSync(certs.ca),
        ...(client ? { cert: fs.readFileSync(client.cert), key: fs.readFileSync(client.key) } : {}),
        headers: token ? { authorization: `Bearer ${token}` } : {},
      },
      (res) => {
        res.resume();
        resolve(res.statusCode!);
      },
    );
    req.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    req.end();
  });
}

describe('bearer tokens from each documented source', () => {
  const sources: [string, () => { args: string[]; env: Record<string, string> }][] = [
    ['--auth-token-file', () => ({ args: ['--auth-token-file', path.join(secrets, 'tokens')], env: {} })],
    ['CTXPROBE_AUTH_TOKEN_FILE', () => ({ args: [], env: { CTXPROBE_AUTH_TOKEN_FILE: path.join(secrets, 'tokens') } })],
    ['CTXPROBE_AUTH_TOKEN', () => ({ args: [], env: { CTXPROBE_AUTH_TOKEN: TOKEN } })],
  ];
  it.each(sources)('%s: gRPC and HTTP refuse a call without the token and answer one with it', async (_, source) => {
    const { args, env } = source();
    const s = await serveCli(modelDir, args, env);
    try {
      expect(s.lines.find((l) => l.event === 'listening')!.auth).toBe('bearer');
      await expect(listModels(s.grpcPort)).rejects.toMatchObject({ code: grpc.status.UNAUTHENTICATED });
      await expect(listModels(s.grpcPort, undefined, 'wrong-token-0123456789')).rejects.toMatchObject({
        code: grpc.status.UNAUTHENTICATED,
      });
      expect((await listModels(s.grpcPort, undefined, TOKEN)).models[0].name).toBeTruthy();
      const http = (token?: string) =>
        fetch(`http://127.0.0.1:${s.httpPort}/v1/models`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
      expect((await http()).status).toBe(401);
      expect((await http(TOKEN)).status).toBe(200);
      // /metrics stays on loopback and open unless --metrics-auth says otherwise.
      expect(s.lines.find((l) => l.event === 'listening')!.metricsHost).toBe('127.0.0.1');
      expect((await fetch(`http://127.0.0.1:${s.metricsPort}/metrics`)).status).toBe(200);
    } finally {
      expect(await s.stop()).toBe(0);
    }
  });
});

describe('TLS set through the environment, mutual TLS through flags', () => {
  let tlsOnly: Served;
  let mutual: Served;
  beforeAll(async () => {
    tlsOnly = await serveCli(modelDir, [], { CTXPROBE_TLS_CERT: certs.serverCert, CTXPROBE_TLS_KEY: certs.serverKey });
    mutual = await serveCli(modelDir, [
      '--tls-cert',
      certs.serverCert,
      '--tls-key',
      certs.serverKey,
      '--tls-client-ca',
      certs.ca,
      '--metrics-tls',
      '--auth-token-file',
      path.join(secrets, 'tokens'),
      '--metrics-auth',
    ]);
  });
  afterAll(async () => {
    await tlsOnly?.stop();
    await mutual?.stop();
  });

  it('CTXPROBE_TLS_CERT / _KEY: both ports speak TLS only', async () => {
    expect(tlsOnly.lines.find((l) => l.event === 'listening')!.tls).toBe('server');
    const res = await listModels(tlsOnly.grpcPort, grpc.credentials.createSsl(fs.readFileSync(certs.ca)), undefined, 'localhost');
    expect(res.models).toHaveLength(1);
    await expect(listModels(tlsOnly.grpcPort)).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect(await httpsGet(tlsOnly.httpPort, '/v1/models')).toBe(200);
    await expect(fetch(`http://127.0.0.1:${tlsOnly.httpPort}/v1/models`)).rejects.toThrow();
  });

  it('--tls-client-ca: gRPC and HTTP both refuse a client without a certificate, or with one from another CA', async () => {
    const read = (f: string) => fs.readFileSync(f);
    const ssl = (withCert: boolean) =>
      withCert
        ? grpc.credentials.createSsl(read(certs.ca), read(certs.clientKey), read(certs.clientCert))
        : grpc.credentials.createSsl(read(certs.ca));
    await expect(listModels(mutual.grpcPort, ssl(false), TOKEN, 'localhost')).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE });
    expect((await listModels(mutual.grpcPort, ssl(true), TOKEN, 'localhost')).models).toHaveLength(1);

    const good = { cert: certs.clientCert, key: certs.clientKey };
    const untrusted = { cert: certs.otherCaCert, key: certs.otherCaKey };
    expect(typeof (await httpsGet(mutual.httpPort, '/v1/models'))).toBe('string'); // handshake refused
    expect(typeof (await httpsGet(mutual.httpPort, '/v1/models', untrusted))).toBe('string');
    expect(await httpsGet(mutual.httpPort, '/v1/models', good)).toBe(401); // TLS passes; the token is still needed
    expect(await httpsGet(mutual.httpPort, '/v1/models', good, TOKEN)).toBe(200);
    // --metrics-tls and --metrics-auth: /metrics under the same policy.
    expect(typeof (await httpsGet(mutual.metricsPort, '/metrics'))).toBe('string');
    expect(await httpsGet(mutual.metricsPort, '/metrics', good)).toBe(401);
    expect(await httpsGet(mutual.metricsPort, '/metrics', good, TOKEN)).toBe(200);
  });
});

describe('ctxprobe health against TLS servers, as the Kubernetes exec probes run it', () => {
  it('checks over TLS by the certificate name, and over mutual TLS with a client identity', async () => {
    const s = await serveCli(modelDir, ['--tls-cert', certs.serverCert, '--tls-key', certs.serverKey, '--tls-client-ca', certs.ca]);
    try {
      const health = (...args: string[]) =>
        spawnSync(process.execPath, [path.join(ROOT, 'bin/ctxprobe.js'), 'health', '--address', `127.0.0.1:${s.grpcPort}`, ...args], {
          encoding: 'utf8',
        });
      const tlsArgs = ['--tls-ca', certs.ca, '--server-name', 'localhost'];
      const ok = health(...tlsArgs, '--tls-cert', certs.clientCert, '--tls-key', certs.clientKey);
      expect(ok.stdout.trim()).toBe('SERVING');
      expect(ok.status).toBe(0);
      const noClientCert = health(...tlsArgs);
      expect(noClientCert.status).toBe(1);
      expect(noClientCert.stdout).toMatch(/^UNREACHABLE/);
      expect(health().stdout).toMatch(/^UNREACHABLE/); // plaintext against TLS
    } finally {
      await s.stop();
    }
  });
});

describe('settings that would fail open refuse to start', () => {
  const cases: [string, () => { args: string[]; env: Record<string, string> }, RegExp][] = [
    ['a certificate without its key', () => ({ args: ['--tls-cert', certs.serverCert], env: {} }), /--tls-cert and --tls-key go together/],
    [
      'a key without its certificate (env)',
      () => ({ args: [], env: { CTXPROBE_TLS_KEY: certs.serverKey } }),
      /--tls-cert and --tls-key go together/,
    ],
    ['a client CA without TLS', () => ({ args: ['--tls-client-ca', certs.ca], env: {} }), /--tls-client-ca .* needs --tls-cert/],
    [
      'a key that is not the certificate’s',
      () => ({ args: ['--tls-cert', certs.serverCert, '--tls-key', certs.clientKey], env: {} }),
      /do not make a TLS identity/,
    ],
    [
      'a missing certificate file',
      () => ({ args: ['--tls-cert', '/nonexistent.pem', '--tls-key', certs.serverKey], env: {} }),
      /tls-cert: cannot read/,
    ],
    [
      'tokens given twice',
      () => ({ args: ['--auth-token-file', path.join(secrets, 'tokens')], env: { CTXPROBE_AUTH_TOKEN: TOKEN } }),
      /bearer tokens are given twice/,
    ],
    ['an empty token variable', () => ({ args: [], env: { CTXPROBE_AUTH_TOKEN: '' } }), /CTXPROBE_AUTH_TOKEN is set but empty/],
    [
      'a missing token file',
      () => ({ args: [], env: { CTXPROBE_AUTH_TOKEN_FILE: '/nonexistent/tokens' } }),
      /auth-token-file: cannot read/,
    ],
    ['a short token', () => ({ args: [], env: { CTXPROBE_AUTH_TOKEN: 'short' } }), /at least 16 characters/],
    ['metrics auth without tokens', () => ({ args: ['--metrics-auth'], env: {} }), /--metrics-auth needs bearer tokens/],
    ['metrics TLS without TLS', () => ({ args: ['--metrics-tls'], env: {} }), /--metrics-tls needs --tls-cert/],
  ];
  it.each(cases)('%s', async (_, setting, message) => {
    const { args, env } = setting();
    const err = await serveCli(modelDir, args, env).then(
      (s) => (s.stop(), new Error('it served')),
      (e) => e,
    );
    expect(err.code).toBe(1);
    expect(err.message).toMatch(message);
  });
});

describe('limits set the way users set them', () => {
  it('--max-continuations, CTXPROBE_MAX_SCORED_TOKENS, --max-answer-values, --tokenizer-workers 0 and CTXPROBE_CPU_MEM_ARENA take effect', async () => {
    const s = await serveCli(modelDir, ['--max-continuations', '2', '--tokenizer-workers', '0', '--max-answer-values', '200'], {
      CTXPROBE_MAX_SCORED_TOKENS: '6',
      CTXPROBE_CPU_MEM_ARENA: 'on',
    });
    try {
      const { v1 } = loadPackage();
      const client = new v1.Scoring(`127.0.0.1:${s.grpcPort}`, grpc.credentials.createInsecure());
      const score = (item: object) =>
        new Promise<grpc.ServiceError | null>((resolve) => client.Score({ items: [item] }, (err) => resolve(err)));
      const three = await score({ contextText: 'Hi', continuationsText: [' a', ' b', ' c'] });
      expect(three!.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(three!.details).toMatch(/^items\[0\]\.continuations: 3 continuations, over the limit of 2 per item/);
      const long = await score({ contextText: 'Hi', continuationsText: [' and a story that goes on for a good many tokens'] });
      expect(long!.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
      expect(long!.details).toMatch(/scored tokens, over the limit of 6 per answer \(--max-scored-tokens\)/);
      // Within the token limit, over the answer's: 2 or 3 tokens × (1 + 100 alternatives).
      const alternatives = await score({ contextText: 'Hi', continuationsText: [' a b'], topK: 100 });
      expect(alternatives!.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
      expect(alternatives!.details).toMatch(/^items: the answer would hold \d+ values \(scored tokens × \(1 \+ top-k\)\), over the limit of 200 per answer \(--max-answer-values\)/);
      // Every kind of item: a chunked context, and chunked and plain items counted together.
      const chunks = [{ label: 'history', text: 'User: Hi\n' }, { label: 'knowledge', text: 'Bot:' }];
      const chunked = await score({ contextChunks: chunks, continuationsText: [' and a story that goes on for a good many tokens'] });
      expect(chunked?.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
      expect(chunked!.details).toMatch(/^items: \d+ scored tokens, over the limit of 6 per answer \(--max-scored-tokens\)/);
      const both = await new Promise<grpc.ServiceError | null>((resolve) =>
        client.Score(
          { items: [{ contextText: 'Hi', continuationsText: [' a b c d'] }, { contextChunks: chunks, continuationsText: [' e f g h'] }] },
          (err) => resolve(err),
        ),
      );
      expect(both!.details).toMatch(/^items: \d+ scored tokens, over the limit of 6/);
      expect(await score({ contextChunks: chunks, continuationsText: [' a', ' b'] })).toBeNull();
      // Within the limits it scores (tokenising on the event loop, with the arena on).
      expect(await score({ contextText: 'Hi', continuationsText: [' a', ' b'] })).toBeNull();
      client.close();
    } finally {
      expect(await s.stop()).toBe(0);
    }
  });
});
