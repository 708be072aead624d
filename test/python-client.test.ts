// The Python client (examples/python) against a running server. Needs Debian's
// python3-grpcio and python3-grpc-tools (CI installs them); skips, saying so, without.
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModel, type LoadedModel } from '../src/serving/repository.js';
import { CtxprobeServer } from '../src/server.js';
import { FAMILY_FIXTURES, makeFixture, tempDir } from './fixtures.js';
import { makeCertificates } from './certs.js';
import fs from 'node:fs';
import { directScoring } from '../src/requests/scoring.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const python = process.env.CTXPROBE_PYTHON ?? '/usr/bin/python3';
let available = false;
try {
  execFileSync(python, ['-c', 'import grpc, grpc_tools.protoc'], { stdio: 'ignore' });
  available = true;
} catch {
  console.warn(`skipping the Python client test: ${python} lacks grpcio / grpc_tools (apt-get install python3-grpcio python3-grpc-tools)`);
}

// Any python3 will do: with -S it has no site-packages, so no grpc, as a Python without
// grpcio installed.
const anyPython = ['/usr/bin/python3', 'python3'].find((p) => {
  try {
    execFileSync(p, ['-S', '-c', 'import sys'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
});

describe.skipIf(!anyPython)('Python client, without grpcio', () => {
  it('says how to install it and exits with status 1, where it ended in a ModuleNotFoundError traceback', async () => {
    const client = path.join(root, 'examples/python/ctxprobe_client.py');
    const run = promisify(execFile)(anyPython!, ['-S', client, '--context', 'User: Hi Bot:', '--continuation', ' hello'], { encoding: 'utf8' });
    const failed = await run.then(
      () => undefined,
      (e: { code: number; stdout: string; stderr: string }) => e,
    );
    expect(failed?.code).toBe(1);
    expect(failed!.stdout).toBe('');
    expect(failed!.stderr).toMatch(/^ctxprobe_client\.py: \S+ cannot import grpc: apt-get install python3-grpcio python3-grpc-tools .*pip install grpcio grpcio-tools/);
    expect(failed!.stderr).not.toMatch(/Traceback|ModuleNotFoundError/);
  });
});

describe.skipIf(!available)('Python client', () => {
  let model: LoadedModel;
  let server: CtxprobeServer;
  let stubs: string;
  beforeAll(async () => {
    stubs = tempDir('pystubs');
    execFileSync('bash', [path.join(root, 'examples/python/generate.sh'), stubs], { env: { ...process.env, PYTHON: python } });
    model = await loadModel({ name: 'qwen', path: makeFixture(FAMILY_FIXTURES.qwen2!).dir, threads: 1 });
    server = await CtxprobeServer.start({ port: 0, metricsPort: -1 });
    server.addModel(model);
    server.setServing();
  });
  afterAll(async () => server?.close());

  it.each([false, true])('scores through the generated stubs (stream: %s) as the library does', async (stream) => {
    const conts = [' Gustave Eiffel.', ' Nobody knows.', ' In 1889.'];
    const args = [
      path.join(root, 'examples/python/ctxprobe_client.py'),
      '--address',
      server.address,
      '--context',
      'User: Who designed it? Bot:',
      '--continuation',
      ...conts,
    ];
    if (stream) args.push('--stream');
    // Asynchronously: the server answers from this same process.
    const { stdout } = await promisify(execFile)(python, args, { encoding: 'utf8', env: { ...process.env, CTXPROBE_STUBS: stubs } });
    const out = JSON.parse(stdout);
    const [direct] = await directScoring(model.scorer).loglikelihood([{ context: 'User: Who designed it? Bot:', continuations: conts }]);
    expect(out.models).toEqual(['qwen']);
    out.scores.forEach((s: any, i: number) => {
      expect(s.token_ids).toEqual(direct![i]!.tokenIds);
      expect(Math.abs(s.logprob - direct![i]!.logprob)).toBeLessThan(1e-5);
    });
    const best = direct!.reduce((b, c, i) => (c.logprob > direct![b]!.logprob ? i : b), 0);
    expect(out.selected.acc).toBe(best);
  });

  it('generates through the generated Generation stub: the tokens, log-probs and text the serving layer gives', async () => {
    const { stdout } = await promisify(execFile)(python, [path.join(root, 'examples/python/ctxprobe_client.py'), '--address', server.address, '--generate', 'User: Hi Bot:', '--max-tokens', '6'], {
      encoding: 'utf8',
      env: { ...process.env, CTXPROBE_STUBS: stubs },
    });
    const out = JSON.parse(stdout);
    const [want] = (await server.service.generate(
      server.service.model(undefined),
      [model.engine.tokenizer.encode('User: Hi Bot:', true)],
      { temperature: 0, topP: 1, topK: 0, minP: 0, maxTokens: 6, stop: [], n: 1, logprobs: 1 },
      {},
    ))[0]!;
    expect(out.steps.map((s: any) => s.token_id)).toEqual(want!.tokens);
    expect(out.steps.map((s: any) => s.logprob)).toEqual(want!.logprobs.map((x: number) => Math.fround(x)));
    expect(out.text).toBe(want!.text);
    expect(out.steps.at(-1).finish_reason).toBe(want!.finish);
  });

  it('attributes through the generated Probing stub as the library does', async () => {
    const { prepareAttribution } = await import('../src/requests/attribution.js');
    const chunks = ['instruction=Answer from the knowledge. ', 'history=User: Who built it? ', 'knowledge=Knowledge: Eiffel built it. ', 'response=Bot: Eiffel.'];
    const { stdout } = await promisify(execFile)(python, [path.join(root, 'examples/python/ctxprobe_client.py'), '--address', server.address, '--attribute', ...chunks], {
      encoding: 'utf8',
      env: { ...process.env, CTXPROBE_STUBS: stubs },
    });
    const out = JSON.parse(stdout);
    const prepared = await prepareAttribution(model.engine, [{ chunks: chunks.map((c) => ({ label: c.slice(0, c.indexOf('=')), text: c.slice(c.indexOf('=') + 1) })) }]);
    const [want] = prepared.finish((await model.scorer.scoreUnits(prepared.units)).scores);
    expect(out.target).toBe('response');
    expect(out.chunks.map((c: any) => c.label)).toEqual(['instruction', 'history', 'knowledge']);
    out.chunks.forEach((c: any, k: number) => {
      expect(Math.abs(c.remove - want!.chunks[k]!.remove!.delta)).toBeLessThan(1e-5);
      expect(Math.abs(c.mask - want!.chunks[k]!.mask!.delta)).toBeLessThan(1e-5);
    });
  });

  it('reaches a server with mutual TLS and a bearer token, through its flags', async () => {
    const certs = makeCertificates(tempDir('py-certs'));
    const token = 'python-token-0123456789abcdef';
    const tokenFile = path.join(tempDir('py-token'), 'token');
    fs.writeFileSync(tokenFile, `# comment\n${token}\n`);
    const secured = await CtxprobeServer.start({
      port: 0,
      metricsPort: -1,
      tls: { cert: certs.serverCert, key: certs.serverKey, clientCa: certs.ca },
      authTokens: [token],
    });
    secured.addModel(model);
    secured.setServing();
    try {
      const run = (extra: string[]) =>
        promisify(execFile)(
          python,
          [
            path.join(root, 'examples/python/ctxprobe_client.py'),
            '--address',
            `127.0.0.1:${secured.port}`,
            '--server-name',
            'localhost',
            '--context',
            'User: Hi Bot:',
            '--continuation',
            ' hello',
            ...extra,
          ],
          { encoding: 'utf8', env: { ...process.env, CTXPROBE_STUBS: stubs } },
        );
      const tls = ['--tls-ca', certs.ca, '--tls-cert', certs.clientCert, '--tls-key', certs.clientKey];
      const { stdout } = await run([...tls, '--token-file', tokenFile]);
      const [direct] = await directScoring(model.scorer).loglikelihood([{ context: 'User: Hi Bot:', continuations: [' hello'] }]);
      expect(Math.abs(JSON.parse(stdout).scores[0].logprob - direct![0]!.logprob)).toBeLessThan(1e-5);
      await expect(run(tls)).rejects.toThrow(/UNAUTHENTICATED/);
    } finally {
      await secured.drain();
    }
  });

  it('without stubs, says to run generate.sh and exits with status 1', async () => {
    const args = [path.join(root, 'examples/python/ctxprobe_client.py'), '--context', 'User: Hi Bot:', '--continuation', ' hello'];
    const empty = tempDir('no-stubs');
    const failed = await promisify(execFile)(python, args, { encoding: 'utf8', env: { ...process.env, CTXPROBE_STUBS: empty } }).then(
      () => undefined,
      (e: { code: number; stderr: string }) => e,
    );
    expect(failed?.code).toBe(1);
    expect(failed!.stderr).toBe(`ctxprobe_client.py: no stubs in ${empty}: run examples/python/generate.sh (or set CTXPROBE_STUBS to where it wrote them)\n`);
  });

  it('generate.sh finds the Python that has grpc_tools without being told', () => {
    const env = { ...process.env };
    delete env.PYTHON;
    const out = execFileSync('bash', [path.join(root, 'examples/python/generate.sh'), tempDir('pystubs2')], { env, encoding: 'utf8' });
    const chosen = /\(for (.+)\)/.exec(out)![1]!;
    expect(() => execFileSync(chosen, ['-c', 'import grpc_tools.protoc'], { stdio: 'ignore' })).not.toThrow();
  });
});
