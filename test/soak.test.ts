// Soak, bounded in count and time, against the real `ctxprobe serve` process: 200
// concurrent clients mixing good, bad, cancelled and over-deadline calls over gRPC and
// HTTP, one large request within the limits and one over them. Every good answer equals
// its solo answer; health on the health port answers within 100 ms (polled from a
// process of its own), on the main port within 500 ms; queued and
// in-flight gauges return to 0; the server's RSS after stays within 10% above its level
// before.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPackage } from '../src/grpc/proto.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { scrape } from './helpers.js';
import { ROOT, serveCli, type Served } from './cli-serve.js';
import { rng } from '../src/model/synthetic.js';

const CLIENTS = 200;
const CALLS_PER_CLIENT = 5;
const TIME_LIMIT_MS = 90_000;

let s: Served;
beforeAll(async () => {
  const dir = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 256 }).dir;
  s = await serveCli(dir, ['--max-text-bytes', String(2 ** 20), '--max-queue-delay-ms', '5', '--health-port', '0']);
});
afterAll(async () => s?.stop());

const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
/** The RSS level: the median of 10 samples over 2 s (single samples jump with GC timing). */
async function rssLevel(pid: number): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < 10; i++) {
    samples.push(rssMiB(pid));
    await new Promise((r) => setTimeout(r, 200));
  }
  return samples.sort((a, b) => a - b)[5]!;
}

describe('soak', () => {
  it('stays correct, responsive and bounded under 200 mixed clients', async () => {
    const { v1 } = loadPackage();
    // A connection of its own per client, as 200 client processes would have. (On one
    // shared connection, Node's HTTP/2 rapid-reset protection closes the session when the
    // cancelling clients' RST_STREAMs pile up, failing everyone's calls on it.)
    const client = () =>
      new v1.Scoring(`127.0.0.1:${s.grpcPort}`, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
    const score = (c: ReturnType<typeof client>, req: object, options: grpc.CallOptions = {}) =>
      new Promise<any>((resolve) => c.Score(req, options, (err, res) => resolve({ err, res })));
    const items = Array.from({ length: 12 }, (_, i) => ({
      id: `q${i}`,
      contextText: `User: question ${i} about the tower? Knowledge: it was built in ${1880 + i}. Bot:`,
      continuationsText: [` In ${1880 + i}.`, ' I do not know.', ` It is ${i} metres tall.`],
    }));
    const httpPrompt = (i: number) => `The tower number ${i} was built in the year ${1880 + i} by many workers.`;
    const http = (body: object) =>
      fetch(`http://127.0.0.1:${s.httpPort}/v1/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(body),
      }).then(async (r) => ({ status: r.status, body: (await r.json()) as any }));

    // Solo answers, one call at a time.
    const solo = client();
    const alone = new Map<string, number[]>();
    for (const item of items) {
      const { res } = await score(solo, { items: [item] });
      alone.set(
        item.id,
        res.items[0].continuations.map((c: any) => c.logprob),
      );
    }
    const aloneHttp = new Map<number, number[]>();
    for (let i = 0; i < 4; i++) {
      const { body } = await http({ prompt: httpPrompt(i), echo: true, max_tokens: 0, logprobs: 1 });
      aloneHttp.set(i, body.choices[0].logprobs.token_logprobs);
    }
    // Health, every 20 ms, from a process of its own (this one is busy being 200 clients).
    const pollHealth = (port: number) => {
      const script = `
        const { healthClientConstructor } = await import(${JSON.stringify(pathToFileURL(path.join(ROOT, 'dist/src/health.js')).href)});
        const grpc = await import('@grpc/grpc-js');
        const Health = healthClientConstructor();
        const c = new Health('127.0.0.1:${port}', grpc.credentials.createInsecure());
        let worst = 0, checks = 0, stop = false;
        process.on('SIGTERM', () => { stop = true; });
        while (!stop) {
          const t = performance.now();
          await new Promise((resolve) => c.Check({ service: '' }, { deadline: Date.now() + 2000 }, () => resolve()));
          if (checks > 0) worst = Math.max(worst, performance.now() - t);
          checks++;
          await new Promise((r) => setTimeout(r, 20));
        }
        process.stdout.write(JSON.stringify({ worst, checks }));
        process.exit(0);
      `;
      const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      child.stdout!.on('data', (d) => (out += d));
      const done = new Promise<{ worst: number; checks: number }>((resolve) => child.on('exit', () => resolve(JSON.parse(out))));
      return { stop: () => (child.kill('SIGTERM'), done) };
    };

    const round = async () => {
      const counts = { good: 0, goodHttp: 0, bad: 0, cancelled: 0, deadline: 0 };
      const started = Date.now();
      const one = async (c: ReturnType<typeof client>, r: () => number) => {
        const kind = r();
        const item = items[Math.floor(r() * items.length)]!;
        if (kind < 0.4) {
          const { err, res } = await score(c, { items: [item] });
          expect(err).toBeNull();
          res.items[0].continuations.forEach((x: any, k: number) =>
            expect(Math.abs(x.logprob - alone.get(item.id)![k]!)).toBeLessThan(1e-5),
          );
          counts.good++;
        } else if (kind < 0.55) {
          const i = Math.floor(r() * 4);
          const { status, body } = await http({ prompt: httpPrompt(i), echo: true, max_tokens: 0, logprobs: 1 });
          expect(status).toBe(200);
          body.choices[0].logprobs.token_logprobs.forEach((lp: number | null, k: number) =>
            lp === null ? expect(aloneHttp.get(i)![k]).toBeNull() : expect(Math.abs(lp - aloneHttp.get(i)![k]!)).toBeLessThan(1e-5),
          );
          counts.goodHttp++;
        } else if (kind < 0.7) {
          const bad =
            r() < 0.5
              ? { items: [{ contextIds: { ids: [1, 2] }, continuationsIds: [{ ids: [10 ** 7] }] }] }
              : { items: [{ ...item, continuationsText: [] }] };
          const { err } = await score(c, bad);
          expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
          counts.bad++;
        } else if (kind < 0.85) {
          // Cancelled by the client after 0-20 ms: CANCELLED, or an answer if it was quicker.
          const err = await new Promise<grpc.ServiceError | null>((resolve) => {
            const call = c.Score({ items: [item] }, (e) => resolve(e));
            setTimeout(() => call.cancel(), Math.floor(r() * 20));
          });
          if (err) expect(err.code).toBe(grpc.status.CANCELLED);
          counts.cancelled++;
        } else {
          const { err } = await score(c, { items: [item] }, { deadline: Date.now() + 1 + Math.floor(r() * 4) });
          if (err) expect(err.code).toBe(grpc.status.DEADLINE_EXCEEDED);
          counts.deadline++;
        }
      };

      // One large request within the limits (a RefuteBench-length text, ~100k tokens to
      // tokenise and answer) and one over them.
      const big = 'Once upon a time the knight answered the refutation in round 3. '.repeat(15_000);
      const large = new Promise<any>((resolve) =>
        client().Tokenize({ texts: [big.slice(0, 150 * 1024)] }, (err, res) => resolve({ err, n: res?.results[0]?.ids.length })),
      );
      const over = score(client(), { items: [{ contextText: big + big, continuationsText: [' x'] }] });

      await Promise.all(
        Array.from({ length: CLIENTS }, async (_, k) => {
          const c = client();
          const r = rng(1000 + k);
          for (let n = 0; n < CALLS_PER_CLIENT && Date.now() - started < TIME_LIMIT_MS; n++) await one(c, r);
          c.close();
        }),
      );
      const largeResult = await large;
      expect(largeResult.err).toBeNull();
      expect(largeResult.n).toBeGreaterThan(80_000);
      const overResult = await over;
      expect(overResult.err.code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(overResult.err.details).toMatch(/over the limit of 1048576 per call \(--max-text-bytes\)/);
      return { ...counts, seconds: (Date.now() - started) / 1000 };
    };

    // Three rounds warm everything up (JIT, 200 connections' buffers, the tokenizer worker;
    // measured: RSS levels off after the second of seven rounds, then moves ±4-8% with the
    // allocator); the baseline is the higher level after the last two. A leak shows as
    // growth past it round after round (one was seen here at ~30 MiB a round).
    await round();
    await round();
    const rssAfterSecond = await rssLevel(s.child.pid!);
    const warmup = await round();
    const rssBefore = Math.max(rssAfterSecond, await rssLevel(s.child.pid!));
    const poller = pollHealth(s.healthPort!);
    const mainPoller = pollHealth(s.grpcPort);
    const measured = await round();
    const health = await poller.stop();
    const mainHealth = await mainPoller.stop();

    // Gauges back to 0, and memory back to where it was.
    let metrics = await scrape(s.metricsPort);
    for (let t = 0; t < 50 && (metrics.get('ctxprobe_calls_in_flight') !== 0 || metrics.get('ctxprobe_queued_items{model="x"}')); t++) {
      await new Promise((r) => setTimeout(r, 100));
      metrics = await scrape(s.metricsPort);
    }
    const queued = [...metrics].filter(([k]) => k.startsWith('ctxprobe_queued_items')).map(([, v]) => v);
    const inFlightItems = [...metrics].filter(([k]) => k.startsWith('ctxprobe_in_flight_items')).map(([, v]) => v);
    expect(metrics.get('ctxprobe_calls_in_flight')).toBe(0);
    expect(queued.every((v) => v === 0)).toBe(true);
    expect(inFlightItems.every((v) => v === 0)).toBe(true);
    const rssAfter = await rssLevel(s.child.pid!);
    const lag = (k: string) => Math.round((metrics.get(k) ?? NaN) * 1000);
    const serverLoopLagMs = {
      max: lag('nodejs_eventloop_lag_max_seconds'),
      p99: lag('nodejs_eventloop_lag_p99_seconds'),
      p50: lag('nodejs_eventloop_lag_p50_seconds'),
    };
    const report = {
      warmup,
      measured,
      serverLoopLagMs,
      worstHealthMs: Math.round(health.worst),
      worstMainPortHealthMs: Math.round(mainHealth.worst),
      healthChecks: health.checks,
      rssBefore: Math.round(rssBefore),
      rssAfter: Math.round(rssAfter),
    };
    console.log(`soak: ${JSON.stringify(report)}`);
    expect(measured.good + measured.goodHttp).toBeGreaterThan(200);
    expect(health.checks).toBeGreaterThan(10);
    expect(mainHealth.checks).toBeGreaterThan(5);
    // The health port answers from its own thread. Health on the main port waits behind
    // the burst of 200 calls (measured here: 160-210 ms, the event loop's p99 ~80 ms), and
    // still far from the seconds it waited before passes and tokenisation left the loop.
    expect(health.worst).toBeLessThan(100);
    expect(mainHealth.worst).toBeLessThan(500);
    // Bounded: no more than 10% above the level before (falling is memory returned).
    expect((rssAfter - rssBefore) / rssBefore).toBeLessThan(0.1);
  }, 180_000);
});
