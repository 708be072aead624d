// A drain that always ends, and counters that stay true: SIGTERM against the real CLI
// with connections that never close and streams that never half-close; cancelled
// streams and expired deadlines as the metrics record them.
import { execFile, spawn } from 'node:child_process';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPackage } from '../src/grpc/proto.js';
import { loadModel, type LoadedModel } from '../src/serving/repository.js';
import { CtxprobeServer } from '../src/server.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { scrape } from './helpers.js';
import { ROOT, serveCli } from './cli-serve.js';

let modelDir: string;
beforeAll(() => {
  modelDir = makeFixture(FAMILY_FIXTURES.llama!).dir;
});

/** A TCP connection that speaks the HTTP/2 preface and then says nothing, ever. */
function silentHttp2(port: number): Promise<net.Socket> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => {
      socket.write('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
      socket.write(Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0])); // an empty SETTINGS frame
      resolve(socket);
    });
    socket.on('error', () => {});
  });
}

/** A ScoreStream that sends one item and never half-closes. */
function openStream(port: number) {
  const { v1 } = loadPackage();
  const client = new v1.Scoring(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const stream = client.ScoreStream();
  stream.on('error', () => {});
  stream.on('data', () => {});
  stream.write({ item: { id: 'a', contextText: 'Hello', continuationsText: [' world'] } });
  return { client, stream };
}

describe('SIGTERM', () => {
  it('ends within the drain deadline despite a silent connection and a stream that never half-closes', async () => {
    const s = await serveCli(modelDir, ['--drain-timeout-ms', '800']);
    const socket = await silentHttp2(s.grpcPort);
    const { client } = openStream(s.grpcPort);
    await new Promise((r) => setTimeout(r, 200));
    const started = Date.now();
    const code = await s.stop();
    const took = Date.now() - started;
    expect(code).toBe(0);
    expect(took).toBeLessThan(800 + 2000);
    expect(took).toBeGreaterThanOrEqual(700); // it did wait for the drain first
    expect(s.lines.find((l) => l.event === 'stopped')!.how).toBe('forced');
    socket.destroy();
    client.close();
  });

  it('with no call in flight it ends without waiting out its deadline, whatever a client left open', async () => {
    const s = await serveCli(modelDir, ['--drain-timeout-ms', '20000']);
    // One raw HTTP/2 connection, as a misbehaving client holds it: a call with 1 MiB of
    // metadata, one whose message the server answered but whose stream the client never
    // half-closes, and one whose 10 MiB message never finishes arriving.
    const session = http2.connect(`http://127.0.0.1:${s.grpcPort}`, { settings: { maxHeaderListSize: 16 * 2 ** 20 } });
    session.on('error', () => {});
    const call = (extra: Record<string, string>, claimed: number, sent: number) => {
      const stream = session.request(
        { ':method': 'POST', ':path': '/ctxprobe.v1.Scoring/Score', 'content-type': 'application/grpc', te: 'trailers', ...extra },
        { endStream: false },
      );
      const status = new Promise<string | undefined>((resolve) => {
        stream.on('trailers', (t) => resolve(String(t['grpc-status'])));
        stream.on('response', (h) => h['grpc-status'] !== undefined && resolve(String(h['grpc-status'])));
        stream.on('close', () => resolve(undefined));
      });
      stream.on('error', () => {});
      stream.on('data', () => {});
      const head = Buffer.alloc(5);
      head.writeUInt32BE(claimed, 1);
      stream.write(Buffer.concat([head, Buffer.alloc(sent, 0xff)]));
      return status;
    };
    void call({ 'x-padding': 'x'.repeat(2 ** 20) }, 2 ** 20, 2 ** 20);
    const answered = call({}, 1024, 1024);
    void call({}, 10 * 2 ** 20, 2 ** 20);
    expect(await answered).toBe(String(grpc.status.INTERNAL)); // not a message: answered, yet left open
    const code = await s.stop();
    expect(code).toBe(0);
    expect(s.lines.find((l) => l.event === 'stopped')!.how).toBe('drained');
    session.destroy();
  }, 60_000);

  it('an HTTP request whose body never finishes arriving is no call: the drain does not wait for it', async () => {
    const s = await serveCli(modelDir, ['--drain-timeout-ms', '20000']);
    const socket = net.connect(s.httpPort, '127.0.0.1');
    socket.on('error', () => {});
    await new Promise((r) => socket.once('connect', r));
    socket.write(
      'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"prompt": "',
    );
    socket.write('x'.repeat(1000));
    await new Promise((r) => setTimeout(r, 300));
    expect(await s.stop()).toBe(0);
    expect(s.lines.find((l) => l.event === 'stopped')!.how).toBe('drained');
    socket.destroy();
  }, 60_000);

  it('a SIGTERM while the model loads ends with 0 once the load settles, not with an abort from inside onnxruntime', async () => {
    // The default model, signalled at several moments of its load (before, one in three
    // such signals ended in "terminate called after throwing an instance of
    // 'Napi::Error'", exit 134: the process exited while the session thread was inside
    // onnxruntime).
    for (const delayMs of [0, 50, 100, 150, 200, 250, 300, 400]) {
      const child = spawn(
        process.execPath,
        [path.join(ROOT, 'bin/ctxprobe.js'), 'serve', '--port', '0', '--http-port', '-1', '--metrics-port', '-1'],
        {
          stdio: ['ignore', 'ignore', 'pipe'],
        },
      );
      let stderr = '';
      let signalled = false;
      child.stderr!.on('data', (d) => {
        stderr += d;
        if (!signalled && /"event":"listening"/.test(stderr)) {
          signalled = true;
          setTimeout(() => child.kill('SIGTERM'), delayMs);
        }
      });
      const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
      expect(stderr, `signal ${delayMs} ms after listening`).not.toMatch(/terminate called/);
      expect(code, `signal ${delayMs} ms after listening`).toBe(0);
      expect(stderr).toMatch(/"event":"stopped"/);
    }
  }, 120_000);

  it('a second SIGTERM exits at once', async () => {
    const s = await serveCli(modelDir, ['--drain-timeout-ms', '60000']);
    const { client } = openStream(s.grpcPort);
    await new Promise((r) => setTimeout(r, 200));
    s.child.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    const started = Date.now();
    const code = await s.stop();
    expect(code).toBe(0);
    expect(Date.now() - started).toBeLessThan(1000);
    expect(s.lines.some((l) => /second signal/.test(l.how ?? ''))).toBe(true);
    client.close();
  });
});

describe('a drain that reaches its deadline with streams running', () => {
  it('refuses each started stream in-band with UNAVAILABLE (SSE error event, gRPC status) before closing', async () => {
    const model = await loadModel({ name: 'm', path: makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 2048 }).dir, threads: 1 });
    const server = await CtxprobeServer.start({ port: 0, httpPort: 0, metricsPort: -1 });
    server.addModel(model);
    server.setServing();
    // A completion streaming over HTTP, read until its first token.
    const res = await fetch(`http://127.0.0.1:${server.httpPort}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once', max_tokens: 2000, temperature: 1, stream: true, ignore_eos: true }),
    });
    const reader = res.body!.getReader();
    let sse = new TextDecoder().decode((await reader.read()).value);
    // A gRPC Generate stream, with its first token in.
    const { v1 } = loadPackage();
    const gen = new v1.Generation(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
    const call = gen.Generate({
      prompt: { chunks: [{ label: 'p', text: 'Once' }] },
      sampling: { temperature: 1, maxTokens: 2000, ignoreEos: true },
    });
    const grpcEnd = new Promise<any>((resolve) => {
      call.on('error', resolve);
      call.on('end', () => resolve({ code: 0 }));
    });
    await new Promise((resolve) => call.once('data', resolve));
    call.on('data', () => {});
    // The drain's deadline passes at once.
    expect(await server.close(1)).toBe('forced');
    for (;;) {
      const { value, done } = await reader.read().catch(() => ({ value: undefined, done: true }));
      if (done) break;
      sse += new TextDecoder().decode(value);
    }
    // Before: a bare socket close (no error event, no [DONE]) and CANCELLED on gRPC.
    expect(sse).toMatch(/^data: \{"error":.*shutting down/m);
    expect(sse.trimEnd().endsWith('data: [DONE]')).toBe(true);
    const status = await grpcEnd;
    expect(status.code).toBe(grpc.status.UNAVAILABLE);
    expect(status.details).toMatch(/shutting down/);
    gen.close();
    await model.engine.release();
  });
});

describe('a session thread that dies under ctxprobe serve', () => {
  it('logs an error naming the model and exits non-zero, so the orchestrator restarts the process', async () => {
    const s = await serveCli(modelDir, ['--health-port', '0'], { CTXPROBE_TEST_HOOKS: '1' });
    s.child.kill('SIGUSR2'); // the test hook: the session thread exits as a crash would
    expect(await s.exited).toBe(70);
    const line = s.lines.find((l) => l.event === 'session_host_lost');
    expect(line).toMatchObject({ level: 'error', model: expect.any(String), message: expect.stringMatching(/session host stopped/) });
  }, 60_000);
});

describe('counters that stay true', () => {
  let model: LoadedModel;
  let server: CtxprobeServer;
  beforeAll(async () => {
    model = await loadModel({ name: 'm', path: modelDir, threads: 1 });
    // A long queue delay keeps work queued while streams are cancelled and deadlines pass.
    server = await CtxprobeServer.start({ port: 0, metricsPort: 0, batcher: { maxQueueDelayMs: 400 } });
    server.addModel(model);
    server.setServing();
  });
  afterAll(async () => server?.close());

  it('counts a cancelled ScoreStream once, whatever it had pending, and calls in flight return to 0', async () => {
    const before = await scrape(server.metricsPort!);
    const streams = Array.from({ length: 3 }, () => {
      const { client, stream } = openStream(server.port);
      for (let i = 0; i < 30; i++) stream.write({ item: { id: `p${i}`, contextText: 'Hi', continuationsText: [` there ${i}`] } });
      return { client, stream };
    });
    await new Promise((r) => setTimeout(r, 100));
    for (const { stream, client } of streams) {
      stream.cancel();
      client.close();
    }
    await new Promise((r) => setTimeout(r, 900));
    const after = await scrape(server.metricsPort!);
    const delta = (k: string) => (after.get(k) ?? 0) - (before.get(k) ?? 0);
    expect(delta('ctxprobe_requests_total{method="ScoreStream",code="CANCELLED"}')).toBe(3);
    expect(delta('ctxprobe_requests_total{method="ScoreStream",code="OK"}')).toBe(0);
    expect(after.get('ctxprobe_calls_in_flight')).toBe(0);
    expect(after.get('ctxprobe_queued_items{model="m"}')).toBe(0);
  });

  it('records an expired deadline as DEADLINE_EXCEEDED, not CANCELLED', async () => {
    const before = await scrape(server.metricsPort!);
    const { v1 } = loadPackage();
    const client = new v1.Scoring(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
    const calls = Array.from(
      { length: 5 },
      (_, i) =>
        new Promise<grpc.ServiceError>((resolve) =>
          client.Score(
            { items: [{ contextText: 'Hello', continuationsText: [` w${i}`] }] },
            { deadline: Date.now() + 50 + 20 * i },
            (err) => resolve(err!),
          ),
        ),
    );
    for (const err of await Promise.all(calls)) expect(err.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    client.close();
    await new Promise((r) => setTimeout(r, 600));
    const after = await scrape(server.metricsPort!);
    const delta = (k: string) => (after.get(k) ?? 0) - (before.get(k) ?? 0);
    expect(delta('ctxprobe_requests_total{method="Score",code="DEADLINE_EXCEEDED"}')).toBe(5);
    expect(delta('ctxprobe_requests_total{method="Score",code="CANCELLED"}')).toBe(0);
  });
});

/** POST `body` to `route` and hang up `afterMs` later; whether an answer came first. */
function hangUp(port: number, route: string, body: unknown, afterMs: number): Promise<'answered' | 'hung up'> {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, path: route, method: 'POST', headers: { 'content-type': 'application/json' } });
    req.on('error', () => {});
    req.on('response', () => resolve('answered'));
    req.end(JSON.stringify(body));
    setTimeout(() => {
      req.destroy();
      resolve('hung up');
    }, afterMs);
  });
}

describe('an HTTP call whose client hangs up before the answer', () => {
  it('ends with its socket: in flight 0, counted as 499 / CANCELLED, and a later SIGTERM drains at once', async () => {
    const dir = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 4096 }).dir;
    const s = await serveCli(dir, ['--drain-timeout-ms', '30000']);
    const long = (i: number) => Array.from({ length: 300 }, (_, k) => `word${(k * 7 + i) % 23}`).join(' ');
    // Each takes seconds on one thread; the client leaves after 300 ms, before any answer.
    const calls: [string, unknown][] = [
      ['/v1/completions', { prompt: Array.from({ length: 48 }, (_, i) => long(i)), max_tokens: 0, echo: true, logprobs: 1 }],
      ['/v1/score', { items: Array.from({ length: 48 }, (_, i) => ({ contextText: long(i), continuationsText: [' a', ' b'] })) }],
      [
        '/v1/probe',
        {
          samples: Array.from({ length: 24 }, (_, i) => ({
            chunks: [
              { label: 'a', text: long(i) },
              { label: 'b', text: ' end' },
            ],
          })),
        },
      ],
    ];
    for (const [route, body] of calls) expect(await hangUp(s.httpPort, route, body, 300), route).toBe('hung up');
    let metrics = await scrape(s.metricsPort);
    for (let t = 0; t < 100 && metrics.get('ctxprobe_calls_in_flight') !== 0; t++) {
      await new Promise((r) => setTimeout(r, 50));
      metrics = await scrape(s.metricsPort);
    }
    expect(metrics.get('ctxprobe_calls_in_flight')).toBe(0);
    expect(metrics.get('ctxprobe_requests_total{method="http /v1/completions",code="499"}')).toBe(1);
    expect(metrics.get('ctxprobe_requests_total{method="Score",code="CANCELLED"}')).toBe(1);
    expect(metrics.get('ctxprobe_requests_total{method="Probe",code="CANCELLED"}')).toBe(1);
    const started = Date.now();
    expect(await s.stop()).toBe(0);
    expect(s.lines.find((l) => l.event === 'stopped')!.how).toBe('drained');
    expect(Date.now() - started).toBeLessThan(20_000); // not the 30 s deadline
  }, 90_000);
});

describe('running work stops between passes when its caller is gone', () => {
  it('a probe past its deadline frees the model at the next pass: the next call does not wait for the rest', async () => {
    const model = await loadModel({ name: 'm', path: makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 512 }).dir, threads: 1 });
    // One sample per pass: a long probe is many passes.
    const server = await CtxprobeServer.start({ port: 0, metricsPort: -1 });
    server.addModel({ ...model, prober: new (model.prober.constructor as any)(model.engine, { maxAttentionBytes: 4 * 400 * 400 * 4 }) });
    server.setServing();
    const { v1 } = loadPackage();
    const scoring = new v1.Scoring(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
    const probing = new v1.Probing(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
    const words = Array.from({ length: 60 }, (_, i) => `word${i % 17}`).join(' ');
    const samples = Array.from({ length: 80 }, (_, i) => ({
      chunks: [
        { label: 'a', text: `${i} ${words}` },
        { label: 'b', text: ` end ${i}` },
      ],
    }));
    const probe = (deadlineMs?: number) =>
      new Promise<{ err: grpc.ServiceError | null; ms: number }>((resolve) => {
        const t = Date.now();
        probing.Probe({ samples }, deadlineMs ? { deadline: Date.now() + deadlineMs } : {}, (err) => resolve({ err, ms: Date.now() - t }));
      });
    const score = () =>
      new Promise<number>((resolve, reject) => {
        const t = Date.now();
        scoring.Score({ items: [{ contextText: 'Hi', continuationsText: [' there'] }] }, (err) =>
          err ? reject(err) : resolve(Date.now() - t),
        );
      });
    const full = await probe();
    expect(full.err).toBeNull();
    const cut = probe(Math.max(50, full.ms / 10));
    await new Promise((r) => setTimeout(r, Math.max(50, full.ms / 10) + 20));
    const waited = await score();
    expect((await cut).err!.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    // The Score waited at most about one probe pass, not the rest of the probe.
    expect(waited).toBeLessThan(full.ms / 3);
    scoring.close();
    probing.close();
    await server.close();
  }, 60_000);
});

describe('the health port', () => {
  it('answers from its own thread: SERVING while serving, NOT_SERVING while the main loop is frozen or draining', async () => {
    const model = await loadModel({ name: 'm', path: modelDir, threads: 1 });
    const server = await CtxprobeServer.start({ port: 0, metricsPort: -1, healthPort: 0 });
    server.addModel(model);
    const check = () =>
      new Promise<string>((resolve) =>
        execFile(
          process.execPath,
          [path.join(ROOT, 'bin/ctxprobe.js'), 'health', '--address', `127.0.0.1:${server.healthPort}`],
          (_e, out) => resolve(out.trim()),
        ),
      );
    expect(await check()).toBe('NOT_SERVING'); // loading
    server.setServing();
    await new Promise((r) => setTimeout(r, 100));
    expect(await check()).toBe('SERVING');
    // Freeze this (the main) thread for 3.5 s; a check from another process 2.8 s in
    // must see NOT_SERVING: the health port does not vouch for a frozen server. The
    // checking process is started and warm before the freeze, so a busy machine's slow
    // process start cannot move its check past the freeze.
    const checker = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const { healthClientConstructor } = await import(${JSON.stringify(pathToFileURL(path.join(ROOT, 'dist/src/serving/health.js')).href)});
        const grpc = await import('@grpc/grpc-js');
        const c = new (healthClientConstructor())('127.0.0.1:${server.healthPort}', grpc.credentials.createInsecure());
        const check = () => new Promise((resolve) => c.Check({ service: '' }, (err, res) => resolve(err ? 'UNREACHABLE' : res.status)));
        await check();
        process.stdout.write('ready\\n');
        process.stdin.once('data', () => setTimeout(async () => { process.stdout.write((await check()) + '\\n'); process.exit(0); }, 2800));`,
      ],
      { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] },
    );
    let said = '';
    const ready = new Promise<void>((resolve) =>
      checker.stdout!.on('data', (d: Buffer) => {
        said += d;
        if (said.startsWith('ready\n')) resolve();
      }),
    );
    const during = new Promise<string>((resolve) => checker.stdout!.on('end', () => resolve(said.replace('ready\n', '').trim())));
    await ready;
    checker.stdin!.write('go\n');
    const until = Date.now() + 3500;
    while (Date.now() < until) {
      /* a frozen event loop */
    }
    expect(await during).toBe('NOT_SERVING');
    await new Promise((r) => setTimeout(r, 400));
    expect(await check()).toBe('SERVING');
    const draining = server.drain();
    await new Promise((r) => setTimeout(r, 100));
    expect(await check()).toMatch(/NOT_SERVING|UNREACHABLE/);
    await draining;
  }, 60_000);
});
