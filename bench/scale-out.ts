// Scale-out benchmark: N `ctxprobe serve` replicas (child processes, one thread each) behind
// (a) round-robin and (b) an endpoint picker scoring as the Gateway API Inference
// Extension's does (deploy/k8s/inference-gateway): its approximate prefix index, queue and
// KV-cache scorers on each replica's /metrics, weights prefix 3 / queue 2 / KV 2, the
// highest score wins. The workload is CHARPEval 3-shot as lm-evaluation-harness's
// local-completions sends it with tokenized_requests=False: one /v1/completions request per
// (context, continuation) string, echo, logprobs 1, max_tokens 0, longest first,
// BENCH_CONCURRENT at a time (its num_concurrent). Prints, for N = 1, 2, 3 and each
// policy, the tokens the replicas computed over what one replica computes for the same
// requests, the requests each replica got, the requests the picker sent past the pod with
// the longest prefix match (and which scorer outweighed it), at how many of its decisions
// the replicas' waiting gauges differed (when the queue scorer has a say), and request
// latency p50 / p99. Asserts nothing.
//
//   npm run build && npx tsx bench/scale-out.ts
//   BENCH_SAMPLES=40 BENCH_CONCURRENT=8 BENCH_MODEL_DIR=/path/to/checkpoint  (defaults: 40, 8, the default tiny model)
//   BENCH_PREFIX_CACHE_BYTES=N: each replica's --prefix-cache-bytes (default: the server's, 1 GiB)
//   BENCH_TRACE=1: print each of the picker's decisions to stderr (the request's sample, each
//   pod's prefix / queue / KV score and its waiting and running gauges as last read, the pod
//   chosen), and how often the replicas' waiting gauges differed when it decided
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { buildPrompt, type CharpSample } from '../src/eval/charpeval.js';
import { RESPONSE_TYPES } from '../src/eval/records.js';
import { rng } from '../src/model/synthetic.js';
import { ROOT, serveCli, type Served } from '../test/cli-serve.js';
import { scrape } from '../test/helpers.js';

const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 40);
const CONCURRENT = Number(process.env.BENCH_CONCURRENT ?? 8);
const modelDir = process.env.BENCH_MODEL_DIR ?? '';
const cacheBytes = process.env.BENCH_PREFIX_CACHE_BYTES;
const TRACE = Boolean(process.env.BENCH_TRACE);
/** The served model's name: the default repository's tiny model, or BENCH_MODEL_DIR as `bench`. */
const MODEL = modelDir ? 'bench' : 'tiny-llama';

// ---- the workload -----------------------------------------------------------------------

/** The three samples shipped in data/ are the demonstrations; the scored samples are made
 * here in the same layout (seeded), so that there are enough of them. */
function workload(): { prompt: string; sample: number }[] {
  const demos = fs
    .readFileSync(path.join(ROOT, 'data/charpeval-sample.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as CharpSample);
  const words = (
    'the a bread tower river city music garden train museum ocean book paint cake history ' +
    'built famous old new visit like love know think water salt flour yeast summer winter ' +
    'people friends family travel north south bridge castle forest mountain island coffee ' +
    'recipe festival dance song film camera market street school library science star'
  ).split(' ');
  const sentence = (r: () => number, n: number) =>
    Array.from({ length: n }, (_, i) => {
      const w = words[Math.floor(r() * words.length)]!;
      return i === 0 ? w[0]!.toUpperCase() + w.slice(1) : w;
    }).join(' ') + '.';
  const prompts: { prompt: string; sample: number }[] = [];
  for (let s = 0; s < SAMPLES; s++) {
    const r = rng(9000 + s);
    const sample: CharpSample = {
      history: Array.from({ length: 4 }, (_, t) => ({
        role: t % 2 === 0 ? ('user' as const) : ('bot' as const),
        text: sentence(r, 12 + (t % 3) * 4),
      })),
      user: sentence(r, 14),
      knowledge: sentence(r, 24),
      responses: Object.fromEntries(RESPONSE_TYPES.map((t, k) => [t, sentence(r, 8 + ((s + k) % 5) * 3)])) as CharpSample['responses'],
    };
    const context = buildPrompt(sample, demos);
    for (const t of RESPONSE_TYPES) prompts.push({ prompt: context + ' ' + sample.responses[t], sample: s });
  }
  // The harness sends its requests longest first (its Collator), ties in text order.
  return prompts.sort((x, y) => {
    const [a, b] = [x.prompt, y.prompt];
    return b.length - a.length || (a < b ? -1 : a > b ? 1 : 0);
  });
}

// ---- the replicas -----------------------------------------------------------------------

interface Replica {
  served: Served;
  name: string;
  /** The protocol's gauges as last read (the picker reads them every 50 ms, as its
   * refresh-metrics-interval does by default). */
  waiting: number;
  running: number;
  kv: number;
  blockSize: number;
  numBlocks: number;
}

const series = (name: string, labels = `model="${MODEL}"`) => `${name}{${labels}}`;

async function startReplicas(n: number): Promise<Replica[]> {
  return Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const served = await serveCli(modelDir, [
        ...(modelDir ? ['--name', MODEL] : []),
        ...(cacheBytes ? ['--prefix-cache-bytes', cacheBytes] : []),
      ]);
      const replica: Replica = { served, name: `replica-${i}`, waiting: 0, running: 0, kv: 0, blockSize: 0, numBlocks: 0 };
      await refresh(replica);
      return replica;
    }),
  );
}

async function refresh(r: Replica): Promise<void> {
  const m = await scrape(r.served.metricsPort);
  r.waiting = m.get(series('ctxprobe_requests_waiting')) ?? 0;
  r.running = m.get(series('ctxprobe_requests_running')) ?? 0;
  r.kv = m.get(series('ctxprobe_kv_cache_usage_ratio')) ?? 0;
  const info = [...m.keys()].find((k) => k.startsWith('ctxprobe_cache_config_info{'));
  r.blockSize = Number(/block_size="(\d+)"/.exec(info ?? '')?.[1] ?? 16);
  r.numBlocks = Number(/num_gpu_blocks="(\d+)"/.exec(info ?? '')?.[1] ?? 31250);
}

async function tokensComputed(r: Replica): Promise<number> {
  return (await scrape(r.served.metricsPort)).get(series('ctxprobe_tokens_computed_total')) ?? 0;
}

async function tokensRequested(r: Replica): Promise<number> {
  return (await scrape(r.served.metricsPort)).get(series('ctxprobe_tokens_requested_total')) ?? 0;
}

// ---- the policies -----------------------------------------------------------------------

/** Where a request goes; the picker also counts the requests it sent past the pod with the
 * longest prefix match, by the scorer that outweighed it (queue or KV-cache). */
type Policy = ((prompt: string, replicas: Replica[], sample?: number) => Replica) & {
  overruled?: { queue: number; kv: number };
  /** Decisions taken, and those taken while the replicas' waiting gauges differed. */
  decisions?: { all: number; queuesDiffer: number };
};

function roundRobin(): Policy {
  let next = 0;
  return (_prompt, replicas) => replicas[next++ % replicas.length]!;
}

/** The endpoint picker's approximate prefix index and scorers: the prompt text in blocks of
 * blockSizeTokens × 4 characters (the last one partial), each block's hash chained to the
 * one before and the first seeded with the model name; per pod, an LRU of the blocks the
 * picker itself sent there (as many as its cache_config_info's num_gpu_blocks); a pod's
 * prefix score is the leading blocks it holds over the prompt's blocks. */
function picker(): Policy {
  const MAX_BLOCKS = 256;
  const lru = new Map<Replica, Map<string, true>>();
  const random = rng(7);
  const hashes = (prompt: string, blockSizeTokens: number): string[] => {
    const chars = blockSizeTokens * 4;
    const text = prompt.slice(0, chars * MAX_BLOCKS);
    let previous = crypto.createHash('sha1').update(MODEL).digest('hex');
    const out: string[] = [];
    for (let i = 0; i < text.length; i += chars) {
      previous = crypto
        .createHash('sha1')
        .update(text.slice(i, i + chars))
        .update(previous)
        .digest('hex');
      out.push(previous);
    }
    return out;
  };
  const overruled = { queue: 0, kv: 0 };
  const decisions = { all: 0, queuesDiffer: 0 };
  const policy: Policy = (prompt, replicas, sample) => {
    const blocks = hashes(prompt, replicas[0]!.blockSize);
    // Walk the blocks while some pod holds them; each pod's count is its matched prefix.
    const matched = new Map<Replica, number>();
    for (const h of blocks) {
      const holders = replicas.filter((r) => lru.get(r)?.has(h));
      if (holders.length === 0) break;
      for (const r of holders) matched.set(r, (matched.get(r) ?? 0) + 1);
    }
    const queues = replicas.map((r) => r.waiting);
    const [minQ, maxQ] = [Math.min(...queues), Math.max(...queues)];
    const scores = replicas.map((r) => ({
      r,
      prefix: blocks.length > 0 ? (matched.get(r) ?? 0) / blocks.length : 0,
      queue: maxQ === minQ ? 1 : (maxQ - r.waiting) / (maxQ - minQ),
      kv: 1 - r.kv,
    }));
    const total = (s: (typeof scores)[number]) => 3 * s.prefix + 2 * s.queue + 2 * s.kv;
    const bestScore = Math.max(...scores.map(total));
    const best = scores.filter((s) => total(s) >= bestScore - 1e-12);
    const pick = best[Math.floor(random() * best.length)]!;
    const chosen = pick.r;
    const longest = scores.reduce((a, b) => (b.prefix > a.prefix ? b : a));
    if (pick.prefix < longest.prefix) overruled[2 * (pick.queue - longest.queue) >= 2 * (pick.kv - longest.kv) ? 'queue' : 'kv']++;
    decisions.all++;
    if (maxQ > minQ) decisions.queuesDiffer++;
    if (TRACE) {
      const f = (x: number) => x.toFixed(2);
      const pods = scores.map(
        (s) =>
          `${s.r === chosen ? '*' : ' '}${s.r.name.slice(-1)} p${f(s.prefix)} q${f(s.queue)} kv${f(s.kv)} =${f(total(s))} (w${s.r.waiting} r${s.r.running})`,
      );
      console.error(`  sample ${String(sample).padStart(2)}: ${pods.join(' | ')}`);
    }
    // The index learns from the picker's own decision, before the answer.
    const own = lru.get(chosen) ?? lru.set(chosen, new Map()).get(chosen)!;
    for (const h of blocks) {
      own.delete(h);
      own.set(h, true);
    }
    while (own.size > chosen.numBlocks) own.delete(own.keys().next().value!);
    return chosen;
  };
  policy.overruled = overruled;
  policy.decisions = decisions;
  return policy;
}

// ---- the run ----------------------------------------------------------------------------

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;

async function run(n: number, policyName: string, policy: Policy, prompts: { prompt: string; sample: number }[]) {
  const replicas = await startReplicas(n);
  const before = await Promise.all(replicas.map(tokensComputed));
  const requestedBefore = await Promise.all(replicas.map(tokensRequested));
  let polling = true;
  const poller = (async () => {
    while (polling) {
      await Promise.all(replicas.map(refresh));
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  const latencies: number[] = [];
  const sent = new Map<Replica, number>();
  let next = 0;
  const started = performance.now();
  const worker = async () => {
    while (next < prompts.length) {
      const { prompt, sample } = prompts[next++]!;
      const replica = policy(prompt, replicas, sample);
      sent.set(replica, (sent.get(replica) ?? 0) + 1);
      const t = performance.now();
      const res = await fetch(`http://127.0.0.1:${replica.served.httpPort}/v1/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: MODEL, prompt, max_tokens: 0, logprobs: 1, echo: true, temperature: 0, seed: 1234 }),
      });
      if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
      await res.arrayBuffer();
      latencies.push((performance.now() - t) / 1000);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENT }, worker));
  const seconds = (performance.now() - started) / 1000;
  polling = false;
  await poller;
  const after = await Promise.all(replicas.map(tokensComputed));
  const requested = (await Promise.all(replicas.map(tokensRequested))).reduce((t, a, i) => t + a - requestedBefore[i]!, 0);
  await Promise.all(replicas.map((r) => r.served.stop()));
  latencies.sort((a, b) => a - b);
  return {
    n,
    policyName,
    computed: after.reduce((s, a, i) => s + a - before[i]!, 0),
    requested,
    perReplica: replicas.map((r) => sent.get(r) ?? 0),
    seconds,
    p50: quantile(latencies, 0.5),
    p99: quantile(latencies, 0.99),
  };
}

const prompts = workload();
const chars = prompts.map((p) => p.prompt.length);
const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
console.log(
  `ctxprobe scale-out benchmark — commit ${commit}, ${os.cpus().length} CPU(s) (${os.cpus()[0]?.model ?? '?'}), ` +
    `model ${modelDir || 'the default tiny model'}, 1 thread per replica, prefix cache ${cacheBytes ? `${cacheBytes} bytes` : 'the default 1 GiB'}`,
);
console.log(
  `workload: CHARPEval 3-shot, ${SAMPLES} samples × 6 continuations = ${prompts.length} string prompts ` +
    `(${Math.round(chars.reduce((s, c) => s + c, 0) / chars.length)} characters on average), longest first, ${CONCURRENT} concurrent`,
);
const results = [];
for (const n of [1, 2, 3])
  for (const [name, make] of [
    ['round-robin', roundRobin],
    ['picker', picker],
  ] as const) {
    const policy = make();
    if (TRACE) console.error(`N=${n} ${name}:`);
    results.push({ ...(await run(n, name, policy, prompts)), overruled: policy.overruled, decisions: policy.decisions });
    const r = results.at(-1)!;
    console.error(
      `  ran N=${n} ${name}: ${r.computed} tokens computed, ${r.seconds.toFixed(1)} s` +
        (r.decisions ? `; waiting gauges differed at ${r.decisions.queuesDiffer} of ${r.decisions.all} decisions` : ''),
    );
  }
console.log(
  `\n${Math.round(results[0]!.requested / prompts.length)} tokens a prompt on average (ctxprobe_tokens_requested_total over the requests)`,
);
const one = results.filter((r) => r.n === 1).reduce((s, r) => s + r.computed, 0) / results.filter((r) => r.n === 1).length;
console.log(
  '\n| N | policy | tokens computed | ÷ one replica | requests per replica | past the longest prefix (queue / KV) | waiting differed | p50 (s) | p99 (s) | wall (s) |',
);
console.log('|---|---|---|---|---|---|---|---|---|---|');
for (const r of results)
  console.log(
    `| ${r.n} | ${r.policyName} | ${r.computed} | ${(r.computed / one).toFixed(2)}x | ${r.perReplica.join(' / ')} | ${r.overruled ? `${r.overruled.queue} / ${r.overruled.kv}` : '–'} | ${r.decisions ? `${r.decisions.queuesDiffer} / ${r.decisions.all}` : '–'} | ${r.p50.toFixed(3)} | ${r.p99.toFixed(3)} | ${r.seconds.toFixed(1)} |`,
  );
