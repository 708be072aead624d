// Prefix-cache benchmark: two `ctxprobe serve` processes on the bench model, one with the
// default cache and one with --prefix-cache-bytes 0, fed the same requests the way the
// clients send them. Prints work (from /metrics), wall time, peak RSS and whether the
// answers are bit-identical; asserts nothing.
//
// 1. CHARPEval 3-shot-shaped: an instruction + three demos (~800 tokens) shared by every
//    sample, a ~300-token sample context, six ~30-token continuations; 24 samples; one
//    /v1/completions request per continuation (echo, logprobs 1, max_tokens 0, token
//    ids), longest first, as lm-evaluation-harness's local-completions sends them.
// 2. A 12-round dialogue, each assistant response scored as its own request.
// 3. The budget: the CHARPEval workload again on a server whose cache is smaller than
//    its working set; peak RSS against loaded RSS + budget.
import fs from 'node:fs';
import os from 'node:os';
import { benchModelDir, randomIds } from './model.js';
import { serveCli, type Served } from '../test/cli-serve.js';
import { scrape } from '../test/helpers.js';

const threads = Number(process.env.BENCH_THREADS ?? 0) || os.cpus().length;
const samples = Number(process.env.BENCH_SAMPLES ?? 24);
const fmt = (x: number, d = 2) => x.toFixed(d);
const MODEL = 'bench';
const dir = benchModelDir({ maxPositions: 4096 }, 'ctxprobe-bench-llama-56m-4k');
const mib = (bytes: number) => bytes / 2 ** 20;
const procStatus = (pid: number, key: string) => Number(new RegExp(`${key}:\\s+(\\d+) kB`).exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

function charpeval(): number[][] {
  const demos = randomIds(1, 800);
  const prompts: number[][] = [];
  for (let s = 0; s < samples; s++) {
    const context = [...demos, ...randomIds(100 + s, 280 + (s % 5) * 10)];
    for (let c = 0; c < 6; c++) prompts.push([...context, ...randomIds(1000 + 10 * s + c, 25 + ((s + c) % 4) * 3)]);
  }
  return prompts.sort((a, b) => b.length - a.length);
}

function dialogue(): number[][] {
  // 12 rounds of a 100-token user turn and a 200-token assistant turn; request r scores
  // response r after everything before it.
  const turns: number[] = [];
  const prompts: number[][] = [];
  for (let r = 0; r < 12; r++) {
    turns.push(...randomIds(5000 + r, 100), ...randomIds(6000 + r, 200));
    prompts.push([...turns]);
  }
  return prompts;
}

async function complete(s: Served, prompt: number[]): Promise<unknown> {
  const res = await fetch(`http://127.0.0.1:${s.httpPort}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: 0, logprobs: 1, echo: true, temperature: 0 }),
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  return ((await res.json()) as any).choices[0].logprobs;
}

async function counters(s: Served) {
  const m = await scrape(s.metricsPort);
  const get = (name: string) => m.get(`${name}{model="${MODEL}"}`) ?? 0;
  return {
    requested: get('ctxprobe_tokens_requested_total'),
    computed: get('ctxprobe_tokens_computed_total'),
    reused: get('ctxprobe_prefix_cache_tokens_reused_total'),
    cacheBytes: get('ctxprobe_prefix_cache_bytes'),
    evictions: get('ctxprobe_prefix_cache_evictions_total'),
  };
}

/** Send the prompts one at a time; seconds, answers and the metric deltas. */
async function run(s: Served, prompts: number[][]) {
  const before = await counters(s);
  const answers: unknown[] = [];
  const t = performance.now();
  for (const p of prompts) answers.push(await complete(s, p));
  const seconds = (performance.now() - t) / 1000;
  const after = await counters(s);
  return {
    seconds,
    answers,
    requested: after.requested - before.requested,
    computed: after.computed - before.computed,
    reused: after.reused - before.reused,
    cacheBytes: after.cacheBytes,
    evictions: after.evictions - before.evictions,
  };
}

const start = (extra: string[]) =>
  serveCli(dir, ['--name', MODEL, '--threads', String(threads), '--max-queue-delay-ms', '0', ...extra]);

console.log(`ctxprobe prefix-cache benchmark — ${threads} thread(s), bench model (56M, 4k positions)`);
const on = await start([]);
const off = await start(['--prefix-cache-bytes', '0']);
const warm = randomIds(9, 64);
await complete(on, warm);
await complete(off, warm);
const loadedOn = procStatus(on.serverPid, 'VmRSS');

const report = (name: string, prompts: number[][], a: Awaited<ReturnType<typeof run>>, b: Awaited<ReturnType<typeof run>>) => {
  const identical = a.answers.every((x, i) => JSON.stringify(x) === JSON.stringify(b.answers[i]));
  console.log(`\n${name} (${prompts.length} requests, ${a.requested} tokens requested)`);
  console.log(`   cache on:  ${fmt(a.seconds)} s, computed ÷ requested = ${fmt(a.computed / a.requested, 3)} (${a.computed} tokens; ${a.reused} reused)`);
  console.log(`   cache off: ${fmt(b.seconds)} s, computed ÷ requested = ${fmt(b.computed / b.requested, 3)}`);
  console.log(`   speed-up ${fmt(b.seconds / a.seconds)}x; answers bit-identical: ${identical}; cache holds ${fmt(mib(a.cacheBytes), 0)} MiB`);
};

const charpevalPrompts = charpeval();
const c1 = await run(on, charpevalPrompts);
const c0 = await run(off, charpevalPrompts);
report(`1. CHARPEval 3-shot-shaped, ${samples} samples × 6 continuations, one request each`, charpevalPrompts, c1, c0);
// The cache-off server has run this workload only: its peak is what the passes need.
const offPeak = procStatus(off.serverPid, 'VmHWM');
const onPeak = procStatus(on.serverPid, 'VmHWM');
console.log(`   peak RSS: cache on ${fmt(onPeak, 0)} MiB, cache off ${fmt(offPeak, 0)} MiB (both loaded at ~${fmt(loadedOn, 0)} MiB)`);

// 3. A budget smaller than the working set.
const budget = 64 * 2 ** 20;
const small = await start(['--prefix-cache-bytes', String(budget)]);
await complete(small, warm);
const c = await run(small, charpevalPrompts);
const peak = procStatus(small.serverPid, 'VmHWM');
const same = c.answers.every((x, i) => JSON.stringify(x) === JSON.stringify(c0.answers[i]));
console.log(`\n3. CHARPEval workload, budget ${fmt(mib(budget), 0)} MiB (its working set is ~${fmt(mib(c1.cacheBytes), 0)} MiB)`);
console.log(
  `   computed ÷ requested = ${fmt(c.computed / c.requested, 3)}, ${c.evictions} evictions, ${fmt(c.seconds)} s; answers bit-identical to cache off: ${same}`,
);
console.log(
  `   peak RSS ${fmt(peak, 0)} MiB = cache-off peak ${fmt(offPeak, 0)} + ${fmt(peak - offPeak, 0)} MiB (budget ${fmt(mib(budget), 0)} MiB, cache holds ${fmt(mib(c.cacheBytes), 0)}); (peak − cache-off peak) ÷ budget = ${fmt((peak - offPeak) / mib(budget))}`,
);
await small.stop();

const dialoguePrompts = dialogue();
report('2. 12-round dialogue, each response its own request', dialoguePrompts, await run(on, dialoguePrompts), await run(off, dialoguePrompts));
await on.stop();
await off.stop();
