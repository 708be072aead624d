// Serving benchmark: N concurrent gRPC clients send CHARPEval-shaped items (400-token
// contexts, six 30-token continuations) to a server in a child process; prints
// throughput, p50/p99 latency, and the ratio to in-process scoring of the same items,
// measured in the same run. Prints figures, asserts nothing.
import os from 'node:os';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { benchModelDir, charpevalItems } from './model.js';
import { scoringClient, unary } from '../test/helpers.js';
import { serveCli } from '../test/cli-serve.js';
import { directScoring } from '../src/requests/scoring.js';

const clients = Number(process.env.BENCH_CLIENTS ?? 8);
const count = Number(process.env.BENCH_ITEMS ?? 32);
const threads = Number(process.env.BENCH_THREADS ?? 0) || os.cpus().length;
const fmt = (x: number, d = 1) => x.toFixed(d);

const dir = benchModelDir();
const items = charpevalItems(count, 5000);
const scoredTokens = count * 6 * 30;

// In-process: the scoring library on all items at once (prefix sharing on).
const engine = await Engine.load(dir, { threads });
const scorer = new Scorer(engine, { prefixCacheBytes: 0 }) // runs repeat the same items: measure scheduling, not the cache;
await directScoring(scorer).loglikelihood(items.slice(0, 2)); // warm-up
const inProcessOnce = async () => {
  const t = performance.now();
  await directScoring(scorer).loglikelihood(items);
  return (performance.now() - t) / 1000;
};

// Served: the CLI server in a child process, N clients each sending items one by one.
const server = await serveCli(dir, ['--threads', String(threads), '--metrics-port', '-1', '--http-port', '-1', '--prefix-cache-bytes', '0']);
const port = server.grpcPort;
const pool = Array.from({ length: clients }, () => scoringClient(port));
const send = (c: number, i: number) =>
  unary(pool[c], 'Score', {
    items: [{ id: String(i), contextIds: { ids: items[i]!.context }, continuationsIds: items[i]!.continuations.map((ids) => ({ ids })) }],
  });
await Promise.all(pool.map((_, c) => send(c, c % count))); // warm-up
let latencies: number[] = [];
const servedOnce = async () => {
  latencies = [];
  let next = 0;
  const t = performance.now();
  await Promise.all(
    pool.map(async (_, c) => {
      while (next < count) {
        const i = next++;
        const started = performance.now();
        await send(c, i);
        latencies.push(performance.now() - started);
      }
    }),
  );
  return (performance.now() - t) / 1000;
};
// Alternate the two (the idle one uses no CPU) so machine noise falls on both; medians.
const runs = { inProcess: [] as number[], served: [] as number[] };
for (let r = 0; r < 3; r++) {
  runs.inProcess.push(await inProcessOnce());
  runs.served.push(await servedOnce());
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[1]!;
const inProcess = median(runs.inProcess);
const served = median(runs.served);
pool.forEach((c) => c.close());
await server.stop();
await engine.release();

latencies.sort((a, b) => a - b);
const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))]!;
console.log(
  `ctxprobe serving benchmark — ${clients} clients, ${count} CHARPEval-shaped items (400-token context + 6 × 30-token continuations), ${threads} thread(s)`,
);
console.log(
  `   in-process scoring   ${fmt(inProcess, 2)} s   ${fmt(count / inProcess, 2)} items/s   ${fmt(scoredTokens / inProcess, 0)} scored tokens/s`,
);
console.log(
  `   over gRPC            ${fmt(served, 2)} s   ${fmt(count / served, 2)} items/s   ${fmt(scoredTokens / served, 0)} scored tokens/s`,
);
console.log(`   latency per item     p50 ${fmt(pct(50), 0)} ms   p99 ${fmt(pct(99), 0)} ms`);
console.log(
  `   served / in-process throughput: ${fmt(inProcess / served, 2)} (target ≥ 0.9; medians of 3 alternating runs: in-process ${runs.inProcess.map((x) => fmt(x, 2)).join(', ')} s, served ${runs.served.map((x) => fmt(x, 2)).join(', ')} s)`,
);
