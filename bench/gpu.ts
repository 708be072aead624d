// The GPU workloads of ../shared/gpu/README.md's table, for any device, one JSON line each
// (prints figures, asserts nothing): scoring 1×512, 16×512 and 32×1024 (the notes' 8×1024
// four at once) in tokens/s; probes of 4k, 8k, 16k and 32k tokens in 12 rounds (seconds); generation of
// 1 and 16 streams (tokens/s) with the bytes that cross session.run per decode step. On a
// synthetic checkpoint of the 360M shape of those notes (hidden 960, 32 layers, 15/5 heads,
// vocabulary 49152), which transformers loads as it is: bench/gpu_peer.py runs the same
// workloads in PyTorch on it (bench/gpu-host.sh runs both on a GPU host).
// With --dtype float16 on WebGPU (products accumulate in float16) it also prints the
// log-prob error against float32 on the same tokens, beside its speed.
//
//   node bench/gpu.js [--device webgpu|cpu|cuda] [--dtype float32|float16] [--shape 360m|tiny]
//                     [--only score,probe,generate] [--probe-lengths 4096,8192] [--dir DIR]
// (bench/gpu.js runs the compiled dist/bench/gpu.js: `npm run build` first; from a checkout,
// `npx tsx bench/gpu.ts` does the same.)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Engine, type PassRecord } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { Batcher } from '../src/core/batcher.js';
import { Prober } from '../src/requests/probe.js';
import { Generation, generationModel, runGenerations, type SamplingParams } from '../src/requests/generate.js';
import { writeSyntheticCheckpoint, type SyntheticSpec } from '../src/model/synthetic.js';
import type { ComputeDType } from '../src/common/dtypes.js';
import { randomIds } from './model.js';
import { directScoring } from '../src/requests/scoring.js';

const { values: args } = parseArgs({
  options: {
    device: { type: 'string', default: process.env.BENCH_DEVICE ?? 'webgpu' },
    dtype: { type: 'string' },
    shape: { type: 'string', default: '360m' },
    only: { type: 'string', default: 'score,probe,generate' },
    'probe-lengths': { type: 'string', default: '4096,8192,16384,32768' },
    dir: { type: 'string' },
    threads: { type: 'string', default: '0' },
  },
});

/** The 360M Llama shape of ../shared/gpu/README.md (SmolLM2-360M's), and a tiny one for
 * trying the script on a software GPU. */
const SHAPES: Record<string, SyntheticSpec> = {
  '360m': {
    family: 'llama',
    hidden: 960,
    layers: 32,
    heads: 15,
    kvHeads: 5,
    intermediate: 2560,
    vocab: 300,
    vocabSize: 49152,
    maxPositions: 32768,
    seed: 3,
    scale: 0.05,
    tied: true,
  },
  tiny: {
    family: 'llama',
    hidden: 64,
    layers: 2,
    heads: 4,
    kvHeads: 2,
    intermediate: 128,
    vocab: 300,
    vocabSize: 1024,
    maxPositions: 32768,
    seed: 3,
    scale: 0.1,
  },
};
const shape = SHAPES[args.shape!];
if (!shape) throw new Error(`--shape ${args.shape}: one of ${Object.keys(SHAPES).join(', ')}`);
const dir = args.dir ?? path.join(os.tmpdir(), `ctxprobe-gpu-bench-${args.shape}`);
if (!fs.existsSync(path.join(dir, 'model.safetensors'))) writeSyntheticCheckpoint(dir, shape);

const only = new Set(args.only!.split(','));
const dtype = args.dtype as ComputeDType | undefined;
const threads = Number(args.threads);
const engine = await Engine.load(dir, { device: args.device, ...(dtype ? { dtype } : {}), threads });
const vocab = engine.config.vocabSize;
const base = { device: engine.info.device, dtype: engine.info.dtype, shape: args.shape };
const line = (workload: string, figures: Record<string, unknown>) => console.log(JSON.stringify({ workload, ...base, ...figures }));
line('load', {
  adapter: engine.info.adapter,
  seconds: +engine.info.sessionSeconds.toFixed(2),
  cpuNodes: engine.info.cpuNodes,
  floatNodesOnCpu: engine.info.floatNodesOnCpu,
});

const passes: PassRecord[] = [];
engine.onPass((p) => passes.push(p));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
/** Seconds of `fn`, median of `runs` after one warm-up run. */
async function timed(fn: () => Promise<unknown>, runs = 3): Promise<number> {
  await fn();
  const out: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    await fn();
    out.push((performance.now() - t) / 1000);
  }
  return median(out);
}

// ---- scoring: every token of each sequence (rolling log-likelihood), no prefix cache -----
if (only.has('score')) {
  const scorer = new Scorer(engine, { prefixCacheBytes: 0 });
  const texts = (n: number, len: number, seed: number) => Array.from({ length: n }, (_, i) => ({ text: randomIds(seed + i, len, vocab) }));
  // The notes' "8×1024, 4 at once" is 32 sequences of 1024 in one scheduler's passes.
  for (const [name, n, len] of [
    ['score_1x512', 1, 512],
    ['score_16x512', 16, 512],
    ['score_32x1024', 32, 1024],
  ] as const) {
    const items = texts(n, len, len);
    const seconds = await timed(() => directScoring(scorer).rolling(items));
    const tokens = n * len;
    line(name, { tokens, seconds: +seconds.toFixed(3), tokensPerSecond: Math.round(tokens / seconds) });
  }
  if (engine.info.dtype === 'float16') {
    // The price of float16 products: log-probs against float32 on the same 512 tokens.
    const f32 = await Engine.load(dir, { device: args.device, dtype: 'float32', threads });
    const ids = randomIds(512, 512, vocab);
    const [a, b] = await Promise.all(
      [new Scorer(engine, { prefixCacheBytes: 0 }), new Scorer(f32, { prefixCacheBytes: 0 })].map((s) => directScoring(s).rolling([{ text: ids }])),
    );
    const d = a![0]!.tokenLogprobs.map((v, i) => Math.abs(v - b![0]!.tokenLogprobs[i]!));
    line('float16_error', { tokens: d.length, maxAbs: Math.max(...d), meanAbs: d.reduce((x, y) => x + y, 0) / d.length });
    await f32.release();
  }
}

// ---- probes: a dialogue of 12 rounds, chunk statistics and a heatmap --------------------
if (only.has('probe')) {
  const prober = new Prober(engine);
  for (const T of args['probe-lengths']!.split(',').map(Number)) {
    if (T > engine.config.maxPositions) continue;
    const ids = randomIds(T, T, vocab);
    const per = Math.floor(T / 12);
    const chunkIds = Array.from({ length: 12 }, (_, r) => ({
      label: r === 0 ? 'system' : `${r % 2 ? 'user' : 'assistant'}#${Math.ceil(r / 2)}`,
      ids: ids.slice(r * per, r === 11 ? T : (r + 1) * per),
    }));
    try {
      const seconds = await timed(() => prober.probe([{ chunkIds, excludePositions: [0] }]), 1);
      line(`probe_${T}`, { tokens: T, rounds: 12, seconds: +seconds.toFixed(2) });
    } catch (e) {
      line(`probe_${T}`, { tokens: T, error: (e as Error).message.slice(0, 300) });
    }
  }
}

// ---- generation: greedy decode, each step a unit of the one scheduler --------------------
if (only.has('generate')) {
  const params: SamplingParams = { temperature: 0, topP: 1, topK: 0, minP: 0, maxTokens: 64, stop: [], n: 1, logprobs: 0, ignoreEos: true };
  for (const streams of [1, 16]) {
    const scorer = new Scorer(engine);
    const batcher = new Batcher('bench', scorer);
    const prompts = Array.from({ length: streams }, (_, i) => randomIds(5000 + i, 128, vocab));
    const run = async () => {
      passes.length = 0;
      const t = performance.now();
      const results = await runGenerations(
        prompts.map((p) => new Generation(generationModel(engine, scorer), p, params)),
        (units, continuing) => batcher.submit(units, { continuing }).result,
      );
      return { seconds: (performance.now() - t) / 1000, tokens: results.flat().reduce((n, r) => n + r.tokens.length, 0) };
    };
    await run();
    const { seconds, tokens } = await run();
    // Decode steps: the passes after each prompt's own (one token a row).
    const steps = passes.filter((p) => p.tokens <= p.rows * 4);
    const per = (k: keyof PassRecord['bytes']) => Math.round(steps.reduce((n, p) => n + p.bytes[k], 0) / Math.max(1, steps.length));
    line(`generate_${streams}`, {
      streams,
      tokens,
      seconds: +seconds.toFixed(2),
      tokensPerSecond: +(tokens / seconds).toFixed(1),
      decodeSteps: steps.length,
      bytesPerStep: { inputs: per('inputs'), pastKv: per('pastKv'), outputs: per('outputs'), presentKv: per('presentKv') },
    });
  }
}
await engine.release();
