// The soak workload, shared by the soak test (correctness under load) and bench/soak.ts
// (memory and health latency under the same load, with their bounds): 200 concurrent
// clients against the real `ctxprobe serve`, mixing good, bad, cancelled and over-deadline
// calls over gRPC and HTTP, plus one large request within the limits and one over them.
// It records what went wrong instead of asserting, so a benchmark can run it too.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { loadPackage } from '../src/grpc/proto.js';
import { rng } from '../src/model/synthetic.js';
import { FAMILY_FIXTURES, makeFixture } from './fixtures.js';
import { scrape } from './helpers.js';
import { ROOT, serveCli, type Served } from './cli-serve.js';

export const CLIENTS = 200;
const CALLS_PER_CLIENT = 5;
const TIME_LIMIT_MS = 90_000;

export interface RoundResult {
  good: number;
  goodHttp: number;
  bad: number;
  cancelled: number;
  deadline: number;
  /** What differed from the solo answers or the expected statuses (empty when all is well). */
  wrong: string[];
  seconds: number;
}

export function soakServer(): Promise<Served> {
  const dir = makeFixture({ ...FAMILY_FIXTURES.llama!, maxPositions: 256 }).dir;
  return serveCli(dir, ['--max-text-bytes', String(2 ** 20), '--max-queue-delay-ms', '5', '--health-port', '0']);
}

export async function soakLoad(s: Served) {
  const { v1 } = loadPackage();
  // A connection of its own per client, as 200 client processes would have. (On one
  // shared connection, Node's HTTP/2 rapid-reset protection closes the session when the
  // cancelling clients' RST_STREAMs pile up, failing everyone's calls on it.)
  const client = () =>
    new v1.Scoring(`127.0.0.1:${s.grpcPort}`, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
  const score = (c: ReturnType<typeof client>, req: object, options: grpc.CallOptions = {}) =>
    new Promise<any>((resolve) => c.Score(req, options, (err: grpc.ServiceError | null, res: any) => resolve({ err, res })));
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
  solo.close();
  const aloneHttp = new Map<number, (number | null)[]>();
  for (let i = 0; i < 4; i++) {
    const { body } = await http({ prompt: httpPrompt(i), echo: true, max_tokens: 0, logprobs: 1 });
    aloneHttp.set(i, body.choices[0].logprobs.token_logprobs);
  }
  const near = (a: number | null, b: number | null | undefined) =>
    a === null || b === null || b === undefined ? a === b : Math.abs(a - b) < 1e-5;

  const round = async (): Promise<RoundResult> => {
    const result: RoundResult = { good: 0, goodHttp: 0, bad: 0, cancelled: 0, deadline: 0, wrong: [], seconds: 0 };
    const wrong = (what: string) => result.wrong.length < 20 && result.wrong.push(what);
    const started = Date.now();
    const one = async (c: ReturnType<typeof client>, r: () => number) => {
      const kind = r();
      const item = items[Math.floor(r() * items.length)]!;
      if (kind < 0.4) {
        const { err, res } = await score(c, { items: [item] });
        if (err) return wrong(`good ${item.id}: ${err.code} ${err.details}`);
        res.items[0].continuations.forEach(
          (x: any, k: number) => near(x.logprob, alone.get(item.id)![k]!) || wrong(`good ${item.id}[${k}]: ${x.logprob}`),
        );
        result.good++;
      } else if (kind < 0.55) {
        const i = Math.floor(r() * 4);
        const { status, body } = await http({ prompt: httpPrompt(i), echo: true, max_tokens: 0, logprobs: 1 });
        if (status !== 200) return wrong(`http ${i}: ${status}`);
        body.choices[0].logprobs.token_logprobs.forEach(
          (lp: number | null, k: number) => near(lp, aloneHttp.get(i)![k]) || wrong(`http ${i}[${k}]: ${lp}`),
        );
        result.goodHttp++;
      } else if (kind < 0.7) {
        const bad =
          r() < 0.5
            ? { items: [{ contextIds: { ids: [1, 2] }, continuationsIds: [{ ids: [10 ** 7] }] }] }
            : { items: [{ ...item, continuationsText: [] }] };
        const { err } = await score(c, bad);
        if (err?.code !== grpc.status.INVALID_ARGUMENT) wrong(`bad: ${err?.code}`);
        result.bad++;
      } else if (kind < 0.85) {
        // Cancelled by the client after 0-20 ms: CANCELLED, or an answer if it was quicker.
        const err = await new Promise<grpc.ServiceError | null>((resolve) => {
          const call = c.Score({ items: [item] }, (e: grpc.ServiceError | null) => resolve(e));
          setTimeout(() => call.cancel(), Math.floor(r() * 20));
        });
        if (err && err.code !== grpc.status.CANCELLED) wrong(`cancelled: ${err.code}`);
        result.cancelled++;
      } else {
        const { err } = await score(c, { items: [item] }, { deadline: Date.now() + 1 + Math.floor(r() * 4) });
        if (err && err.code !== grpc.status.DEADLINE_EXCEEDED) wrong(`deadline: ${err.code}`);
        result.deadline++;
      }
    };

    // One large request within the limits (a RefuteBench-length text, ~100k tokens to
    // tokenise and answer) and one over them.
    const big = 'Once upon a time the knight answered the refutation in round 3. '.repeat(15_000);
    const bigClient = client();
    const large = new Promise<any>((resolve) =>
      bigClient.Tokenize({ texts: [big.slice(0, 150 * 1024)] }, (err: grpc.ServiceError | null, res: any) =>
        resolve({ err, n: res?.results[0]?.ids.length }),
      ),
    );
    const over = score(bigClient, { items: [{ contextText: big + big, continuationsText: [' x'] }] });
    await Promise.all(
      Array.from({ length: CLIENTS }, async (_, k) => {
        const c = client();
        const r = rng(1000 + k);
        for (let n = 0; n < CALLS_PER_CLIENT && Date.now() - started < TIME_LIMIT_MS; n++) await one(c, r);
        c.close();
      }),
    );
    const largeResult = await large;
    if (largeResult.err || !(largeResult.n > 80_000)) wrong(`large: ${largeResult.err?.details ?? largeResult.n} tokens`);
    const overResult = await over;
    if (!/over the limit of 1048576 per call \(--max-text-bytes\)/.test(overResult.err?.details ?? ''))
      wrong(`over: ${overResult.err?.details}`);
    bigClient.close();
    result.seconds = (Date.now() - started) / 1000;
    return result;
  };

  /** The gauges once the load has gone: polled until they return to 0 (or 5 s). */
  const settledMetrics = async () => {
    let metrics = await scrape(s.metricsPort);
    const busy = () =>
      metrics.get('ctxprobe_calls_in_flight') !== 0 ||
      [...metrics].some(([k, v]) => /^ctxprobe_(queued|in_flight)_items/.test(k) && v !== 0);
    for (let t = 0; t < 50 && busy(); t++) {
      await new Promise((r) => setTimeout(r, 100));
      metrics = await scrape(s.metricsPort);
    }
    return metrics;
  };

  return { round, settledMetrics };
}

/** Health checks every 20 ms from a process of its own (the caller is busy being 200
 * clients): how many, how many did not answer SERVING, and the slowest. */
export function pollHealth(port: number) {
  const script = `
    const { healthClientConstructor } = await import(${JSON.stringify(pathToFileURL(path.join(ROOT, 'dist/src/serving/health.js')).href)});
    const grpc = await import('@grpc/grpc-js');
    const Health = healthClientConstructor();
    const c = new Health('127.0.0.1:${port}', grpc.credentials.createInsecure());
    let worst = 0, checks = 0, failed = 0, stop = false;
    process.on('SIGTERM', () => { stop = true; });
    while (!stop) {
      const t = performance.now();
      await new Promise((resolve) => c.Check({ service: '' }, { deadline: Date.now() + 10000 }, (err, res) => {
        if (err || res.status !== 'SERVING') failed++;
        resolve();
      }));
      if (checks > 0) worst = Math.max(worst, performance.now() - t);
      checks++;
      await new Promise((r) => setTimeout(r, 20));
    }
    process.stdout.write(JSON.stringify({ worst, checks, failed }));
    process.exit(0);
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  const done = new Promise<{ worst: number; checks: number; failed: number }>((resolve) =>
    child.on('exit', () => resolve(JSON.parse(out))),
  );
  return { stop: () => (child.kill('SIGTERM'), done) };
}

const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

/** The RSS level: the median of 10 samples over 2 s (single samples jump with GC timing). */
export async function rssLevel(pid: number): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < 10; i++) {
    samples.push(rssMiB(pid));
    await new Promise((r) => setTimeout(r, 200));
  }
  return samples.sort((a, b) => a - b)[5]!;
}
