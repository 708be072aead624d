// Fairness: how long a small request waits while a heavy one runs, on the default model
// served by the CLI as users run it. For each heavy kind the hostile-inputs issue measured
// (an attribution of 128 chunks with 250 random subsets; a 66k-token rolling score; 64
// prompts × n 64 generating; the largest Score answer the limits allow), the heavy request
// starts, then a small Score (a 16-token context, a 4-token continuation) goes every 50 ms
// for up to BENCH_SECONDS (default 20; 120 for the attribution, which prepares ~25 s
// first), then the heavy one is cancelled if still running;
// prints the small requests' p50 / p99 / max beside the figures with nothing heavy running.
// BENCH_ROOT=/path/to/another/checkout runs that checkout's server (its `npm run build`
// done) with this client: the figures before and after a change, from one script.
// Prints figures, asserts nothing.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const root = process.env.BENCH_ROOT ?? here;
const seconds = Number(process.env.BENCH_SECONDS ?? 20);
/** The attribution spends ~25 s preparing its 505 variants before it queues (2 cores): its
 * window must outlast that. */
const windowOf = (kind: string) => (kind === 'attribution' ? Math.max(seconds, 120) : seconds);
const kinds = (process.env.BENCH_KINDS ?? 'none,attribution,rolling66k,generation,largest-answer').split(',');

/** The CLI server on free ports over `root`'s model repository (the default model). */
async function serve(): Promise<{ base: string; stop: () => void }> {
  const child = spawn(
    process.execPath,
    [
      path.join(root, 'bin/ctxprobe.js'),
      'serve',
      '--models',
      path.join(root, 'models'),
      '--port',
      '0',
      '--http-port',
      '0',
      '--metrics-port',
      '-1',
    ],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let buf = '';
  let httpPort = 0;
  const port = await new Promise<number>((resolve, reject) => {
    child.stderr!.on('data', (d) => {
      buf += d;
      for (const line of buf.split('\n')) {
        try {
          const l = JSON.parse(line);
          if (l.event === 'listening') httpPort = l.httpPort;
          if (l.event === 'serving') resolve(httpPort);
        } catch {
          /* partial line */
        }
      }
    });
    child.on('exit', (code) => reject(new Error(`server exited ${code}: ${buf.slice(-2000)}`)));
  });
  return { base: `http://127.0.0.1:${port}`, stop: () => child.kill('SIGKILL') };
}

const words = (n: number, seed: number) => Array.from({ length: n }, (_, i) => `w${(seed * 131 + i * 17) % 997}`).join(' ');

/** The heavy request of each kind, as a POST route and body. */
function heavy(kind: string): { route: string; body: unknown } | undefined {
  switch (kind) {
    case 'none':
      return undefined;
    case 'attribution': {
      const chunks = Array.from({ length: 128 }, (_, i) => ({ label: i === 127 ? 'response' : `c${i}`, text: ` ${words(3, i)}.` }));
      return { route: '/v1/attribute', body: { samples: [{ chunks }], randomSubsets: 250 } };
    }
    case 'rolling66k':
      return { route: '/v1/score-rolling', body: { items: [{ text: words(33000, 7) }] } };
    case 'generation':
      return {
        route: '/v1/completions',
        body: { prompt: Array.from({ length: 64 }, (_, i) => words(12, i)), n: 64, max_tokens: 16, temperature: 1, seed: 1 },
      };
    case 'largest-answer': {
      // 2 × 1,290 tokens × (1 + 100): 260,580 values, just under the default --max-answer-values.
      const ids = (n: number, seed: number) => ({ ids: Array.from({ length: n }, (_, i) => (seed * 31 + i * 7) % 384) });
      return {
        route: '/v1/score',
        body: { items: Array.from({ length: 2 }, (_, i) => ({ contextIds: ids(8, i), continuationsIds: [ids(1290, i + 1)], topK: 100 })) },
      };
    }
    default:
      throw new Error(`unknown kind ${kind}`);
  }
}

const quantile = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))] ?? NaN;

const server = await serve();
const post = (route: string, body: unknown, signal?: AbortSignal) =>
  fetch(server.base + route, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal });
const small = { items: [{ contextText: words(16, 3), continuationsText: [' and so on'] }] };
await post('/v1/score', small); // warm-up
try {
  for (const kind of kinds) {
    const h = heavy(kind);
    const abort = new AbortController();
    const started = performance.now();
    let heavyDone: number | undefined;
    let heavyStatus = 0;
    const running = h
      ? post(h.route, h.body, abort.signal).then(
          async (r) => {
            heavyStatus = r.status;
            const text = await r.text();
            heavyDone = performance.now();
            if (r.status !== 200) console.log(JSON.stringify({ heavy: kind, refused: text.slice(0, 300) }));
          },
          () => undefined,
        )
      : Promise.resolve();
    await new Promise((r) => setTimeout(r, 200)); // the heavy request is in
    const latencies: number[] = [];
    const sends: Promise<void>[] = [];
    while (
      performance.now() - started < windowOf(kind) * 1000 &&
      (h === undefined ? latencies.length + sends.length < 40 : heavyDone === undefined)
    ) {
      const t = performance.now();
      sends.push(post('/v1/score', small).then(async (r) => (await r.arrayBuffer(), void latencies.push(performance.now() - t))));
      await new Promise((r) => setTimeout(r, 50));
    }
    abort.abort();
    await Promise.all(sends);
    await running;
    console.log(
      JSON.stringify({
        heavy: kind,
        heavyStatus,
        heavySeconds: !h ? 0 : heavyDone === undefined ? `cancelled after ${windowOf(kind)}` : +((heavyDone - started) / 1000).toFixed(2),
        small: latencies.length,
        p50ms: +quantile(latencies, 0.5).toFixed(1),
        p99ms: +quantile(latencies, 0.99).toFixed(1),
        maxMs: +Math.max(...latencies).toFixed(1),
      }),
    );
  }
} finally {
  server.stop();
}
