// The peer benchmark: ctxprobe and llama.cpp (through node-llama-cpp) on the same weights
// — the 56M bench model, written as an F32 GGUF by bench/gguf.ts — doing the same
// computation, each side in a process of its own (its peak RSS is that process's), 2
// threads, F32 KV on both sides, llama.cpp's flash attention off (it rounds through F16),
// ctxprobe's prefix cache off. Pairs of runs alternate
// the sides; the ratio is llama.cpp's time over ctxprobe's in the same pair.
//
//   multiple choice: CHARPEval-shaped items, a 400-token context and six 30-token
//     continuations each. llama.cpp evaluates each context once and each continuation
//     after it (erasing it again), with logits at every continuation position; ctxprobe
//     scores the items as one request (the context shared across its continuations).
//   rolling: 1024-token texts with logits at every position, on both sides.
//
// The agreement of the two on the same tokens is printed first (max |Δ log-prob|).
// node-llama-cpp is not a dependency of ctxprobe: the first run installs it (pinned, CPU
// binary only) into .bench/peer/. Prints figures, asserts nothing.
//   npx tsx bench/peer.ts                  BENCH_PAIRS=3 BENCH_ITEMS=4 BENCH_TEXTS=4
//   BENCH_MAX_BATCH_TOKENS=N, BENCH_MAX_PAST_MIB=N   ctxprobe's scorer bounds (default 512, 16)
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { benchModelDir, charpevalItems, randomIds } from './model.js';
import { writeLlamaGguf } from './gguf.js';
import { directScoring } from '../src/requests/scoring.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const PEER_DIR = path.join(ROOT, '.bench/peer');
const PEER_VERSION = '3.22.1';
const THREADS = Number(process.env.BENCH_THREADS ?? 2);
const PAIRS = Number(process.env.BENCH_PAIRS ?? 3);
const ITEMS = Number(process.env.BENCH_ITEMS ?? 4);
const TEXTS = Number(process.env.BENCH_TEXTS ?? 4);
const TEXT_TOKENS = 1024;

type Workload = 'mc' | 'rolling';
interface SideResult {
  seconds: number;
  peakMiB: number;
  logprobs?: number[];
}

const peakMiB = () => Number(/VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'))![1]) / 1024;
const texts = () => Array.from({ length: TEXTS }, (_, k) => randomIds(7000 + k, TEXT_TOKENS));

/** node-llama-cpp from .bench/peer/ (not a dependency, so untyped here). */
async function loadPeer(): Promise<any> {
  const entry = path.join(PEER_DIR, 'node_modules/node-llama-cpp/dist/index.js');
  return import(pathToFileURL(entry).href);
}

/** One side, one workload, in this process: a warm-up on other tokens, then the timed run. */
async function runSide(side: 'ctxprobe' | 'llama.cpp', workload: Workload, check: boolean): Promise<SideResult> {
  const dir = benchModelDir();
  const items = charpevalItems(ITEMS);
  const warmItems = charpevalItems(1, 4242);
  if (side === 'ctxprobe') {
    const { Engine } = await import('../src/engine/engine.js');
    const { Scorer } = await import('../src/core/scorer.js');
    const engine = await Engine.load(dir, { threads: THREADS });
    const maxBatchTokens = process.env.BENCH_MAX_BATCH_TOKENS ? Number(process.env.BENCH_MAX_BATCH_TOKENS) : undefined;
    const maxPastBytes = process.env.BENCH_MAX_PAST_MIB ? Number(process.env.BENCH_MAX_PAST_MIB) * 2 ** 20 : undefined;
    const scorer = new Scorer(engine, { prefixCacheBytes: 0, ...(maxBatchTokens ? { maxBatchTokens } : {}), ...(maxPastBytes !== undefined ? { maxPastBytes } : {}) });
    if (check) {
      const scores = await directScoring(scorer).loglikelihood([{ context: items[0]!.context, continuations: [items[0]!.continuations[0]!] }]);
      await engine.release();
      return { seconds: 0, peakMiB: peakMiB(), logprobs: scores[0]![0]!.tokenLogprobs };
    }
    const run =
      workload === 'mc' ? (xs: typeof items) => directScoring(scorer).loglikelihood(xs) : (ts: number[][]) => directScoring(scorer).rolling(ts.map((text) => ({ text })));
    await (workload === 'mc' ? run(warmItems as never) : run([randomIds(99, TEXT_TOKENS)] as never));
    const t = performance.now();
    await (workload === 'mc' ? run(items as never) : run(texts() as never));
    const seconds = (performance.now() - t) / 1000;
    await engine.release();
    return { seconds, peakMiB: peakMiB() };
  }
  const { getLlama } = await loadPeer();
  const llama = await getLlama({ gpu: false, logLevel: 'error' });
  const model = await llama.loadModel({ modelPath: path.join(PEER_DIR, 'bench-56m-f32.gguf') });
  const context = await model.createContext({
    contextSize: 2048,
    batchSize: 512,
    threads: THREADS,
    experimentalKvCacheKeyType: 'F32',
    experimentalKvCacheValueType: 'F32',
    // Off by default: llama.cpp's CPU flash attention rounds through F16 (max |Δ log-prob|
    // against ctxprobe 2.2e-3 on; 7.8e-6 off, the same computation). BENCH_PEER_FLASH=on.
    flashAttention: process.env.BENCH_PEER_FLASH === 'on',
  });
  const seq = context.getSequence();
  // Logits at every position given (the next token is picked greedily: the same work as
  // a score of the given token, plus an argmax).
  const withLogits = (tokens: number[]) =>
    tokens.map((t) => [t, { generateNext: { token: true } }] as [number, { generateNext: { token: true } }]);
  const scoreItems = async (xs: typeof items) => {
    for (const item of xs) {
      await seq.clearHistory();
      await seq.evaluateWithoutGeneratingNewTokens(item.context.slice(0, -1) as never);
      const at = seq.nextTokenIndex;
      for (const c of item.continuations) {
        await seq.controlledEvaluate(withLogits([item.context.at(-1)!, ...c.slice(0, -1)]) as never);
        await seq.eraseContextTokenRanges([{ start: at, end: seq.nextTokenIndex }]);
      }
    }
  };
  const scoreTexts = async (ts: number[][]) => {
    for (const text of ts) {
      await seq.clearHistory();
      await seq.controlledEvaluate(withLogits(text.slice(0, -1)) as never);
    }
  };
  if (check) {
    const item = items[0]!;
    await seq.evaluateWithoutGeneratingNewTokens(item.context.slice(0, -1) as never);
    const cont = item.continuations[0]!;
    const out = await seq.controlledEvaluate(
      [item.context.at(-1)!, ...cont.slice(0, -1)].map((t) => [t, { generateNext: { probabilities: true } }]) as never,
    );
    const logprobs = cont.map((t, k) => Math.log((out[k] as { next: { probabilities: Map<number, number> } }).next.probabilities.get(t)!));
    return { seconds: 0, peakMiB: peakMiB(), logprobs };
  }
  if (workload === 'mc') await scoreItems(warmItems);
  else await scoreTexts([randomIds(99, TEXT_TOKENS)]);
  const t = performance.now();
  if (workload === 'mc') await scoreItems(items);
  else await scoreTexts(texts());
  const seconds = (performance.now() - t) / 1000;
  await context.dispose();
  await model.dispose();
  return { seconds, peakMiB: peakMiB() };
}

function child(side: string, workload: string, check = false): SideResult {
  const out = spawnSync(
    process.execPath,
    ['--import', 'tsx', fileURLToPath(import.meta.url), '--side', side, '--workload', workload, ...(check ? ['--check'] : [])],
    {
      cwd: ROOT,
      encoding: 'utf8',
      env: { ...process.env, MALLOC_MMAP_THRESHOLD_: process.env.MALLOC_MMAP_THRESHOLD_ ?? '1048576' },
    },
  );
  const line = out.stdout.split('\n').find((l) => l.startsWith('{'));
  if (out.status !== 0 || !line) throw new Error(`${side} ${workload} failed (${out.status}): ${out.stderr.slice(-2000)}`);
  return JSON.parse(line);
}

const args = process.argv.slice(2);
if (args[0] === '--side') {
  const result = await runSide(args[1] as 'ctxprobe' | 'llama.cpp', args[3] as Workload, args.includes('--check'));
  process.stdout.write(JSON.stringify(result) + '\n');
  process.exit(0);
}

// ---- the parent: install the peer if needed, write the GGUF, run the pairs ----------------
if (!fs.existsSync(path.join(PEER_DIR, 'node_modules/node-llama-cpp'))) {
  console.log(`installing node-llama-cpp ${PEER_VERSION} (CPU binary) into .bench/peer/ …`);
  fs.mkdirSync(PEER_DIR, { recursive: true });
  fs.writeFileSync(path.join(PEER_DIR, 'package.json'), JSON.stringify({ name: 'ctxprobe-peer', private: true, type: 'module' }));
  execFileSync(
    'npm',
    [
      'install',
      '--no-audit',
      '--no-fund',
      '--omit=optional',
      `node-llama-cpp@${PEER_VERSION}`,
      `@node-llama-cpp/linux-x64@${PEER_VERSION}`,
    ],
    { cwd: PEER_DIR, stdio: 'inherit' },
  );
}
const gguf = path.join(PEER_DIR, 'bench-56m-f32.gguf');
const dir = benchModelDir();
if (!fs.existsSync(gguf) || fs.statSync(gguf).mtimeMs < fs.statSync(path.join(dir, 'model.safetensors')).mtimeMs) writeLlamaGguf(dir, gguf);

const { version } = JSON.parse(fs.readFileSync(path.join(PEER_DIR, 'node_modules/node-llama-cpp/package.json'), 'utf8'));
console.log(
  `ctxprobe vs llama.cpp (node-llama-cpp ${version}) — ${os.cpus()[0]?.model ?? 'cpu'}, ${THREADS} threads, 56M bench model, F32 weights and KV`,
);
const a = child('ctxprobe', 'mc', true).logprobs!;
const b = child('llama.cpp', 'mc', true).logprobs!;
console.log(
  `same weights: max |Δ log-prob| over a 30-token continuation = ${Math.max(...a.map((x, k) => Math.abs(x - b[k]!))).toExponential(2)}`,
);

for (const [workload, what] of [
  ['mc', `multiple choice: ${ITEMS} contexts × 6 continuations (400 + 30 tokens)`],
  ['rolling', `rolling: ${TEXTS} texts × ${TEXT_TOKENS} tokens`],
] as const) {
  console.log(`\n${what}`);
  const ratios: number[] = [];
  for (let p = 0; p < PAIRS; p++) {
    const [first, second] = p % 2 === 0 ? (['ctxprobe', 'llama.cpp'] as const) : (['llama.cpp', 'ctxprobe'] as const);
    const r1 = child(first, workload);
    const r2 = child(second, workload);
    const ours = first === 'ctxprobe' ? r1 : r2;
    const peer = first === 'ctxprobe' ? r2 : r1;
    ratios.push(peer.seconds / ours.seconds);
    console.log(
      `  pair ${p + 1}: ctxprobe ${ours.seconds.toFixed(2)} s, peak ${ours.peakMiB.toFixed(0)} MiB | llama.cpp ${peer.seconds.toFixed(2)} s, peak ${peer.peakMiB.toFixed(0)} MiB | ctxprobe ${(peer.seconds / ours.seconds).toFixed(2)}x`,
    );
  }
  const sorted = [...ratios].sort((x, y) => x - y);
  console.log(
    `  ctxprobe speed ÷ llama.cpp: ${sorted[0]!.toFixed(2)}–${sorted.at(-1)!.toFixed(2)}x (median ${sorted[Math.floor(sorted.length / 2)]!.toFixed(2)}x)`,
  );
}
