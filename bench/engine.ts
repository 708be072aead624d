// Engine benchmark: prints figures, asserts nothing. Run with `npm run bench`.
//
// On a generated Llama-shaped model (~56M parameters: hidden 512, 8 layers, 8 query /
// 4 key-value heads, intermediate 1408, vocabulary 32000), in one run:
//   1. the MatMul roofline of this machine (GFLOP/s of one large MatMul in onnxruntime);
//   2. scoring throughput and model-FLOP utilisation against that roofline;
//   3. a CHARPEval-shaped workload (400-token contexts, six 30-token continuations)
//      scored one sequence at a time, batched, and batched with prefix sharing;
//   4. session-creation time and peak RSS.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import ort from 'onnxruntime-node';
import { GraphBuilder } from '../src/graph/builder.js';
import { rng } from '../src/model/synthetic.js';
import { BENCH_MODEL as MODEL, benchModelDir, charpevalItems, randomIds } from './model.js';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import type { LoglikelihoodRequest } from '../src/requests/scoring.js';
import { directScoring } from '../src/requests/scoring.js';

const threads = Number(process.env.BENCH_THREADS ?? 0) || os.cpus().length;
const quick = process.env.BENCH_QUICK === '1';

const rssMiB = () => process.memoryUsage().rss / 2 ** 20;
const peakRssMiB = () => process.resourceUsage().maxRSS / 1024;
const fmt = (x: number, d = 1) => x.toFixed(d);

async function timeIt(fn: () => Promise<unknown>, repeats: number): Promise<number> {
  await fn(); // warm-up
  const started = performance.now();
  for (let i = 0; i < repeats; i++) await fn();
  return (performance.now() - started) / 1000 / repeats;
}

/** GFLOP/s of one [M,K]×[K,N] MatMul (weights [N,K], transB as the model uses them). */
async function roofline(M: number, K: number, N: number): Promise<number> {
  const g = new GraphBuilder();
  const x = g.input('x', 'float32', [M, K]);
  const r = rng(3);
  const w = g.namedConstant(
    'w',
    'float32',
    [N, K],
    Float32Array.from({ length: N * K }, () => r() - 0.5),
  );
  g.output('y', g.node('FusedMatMul', [x, w], { domain: 'com.microsoft', attrs: { transB: 1 } }), 'float32', [M, N]);
  const session = await ort.InferenceSession.create(g.encode('roofline'), { intraOpNumThreads: threads, graphOptimizationLevel: 'all' });
  const feed = {
    x: new ort.Tensor(
      'float32',
      Float32Array.from({ length: M * K }, () => r() - 0.5),
      [M, K],
    ),
  };
  const seconds = await timeIt(() => session.run(feed), quick ? 3 : 10);
  await session.release();
  return (2 * M * K * N) / seconds / 1e9;
}

/** Inference FLOPs of scoring `T` tokens of one row (matmuls + causal attention). */
function modelFlops(tokens: number, scored: number): number {
  const h = MODEL.hidden;
  const d = h / MODEL.heads;
  const kv = MODEL.kvHeads * d;
  const perLayer = 2 * (h * h + 2 * h * kv + h * h + 3 * h * MODEL.intermediate);
  const attention = MODEL.layers * 2 * 2 * h * ((tokens * (tokens + 1)) / 2); // QKᵀ and PV over the causal half
  return tokens * MODEL.layers * perLayer + attention + scored * 2 * h * MODEL.vocabSize!;
}

async function main() {
  console.log(
    `ctxprobe engine benchmark — ${os.cpus()[0]?.model ?? 'cpu'}, ${threads} thread(s), onnxruntime-node ${ort.env.versions.node ?? ''}`,
  );
  const dir = benchModelDir();
  const weightBytes = fs.statSync(path.join(dir, 'model.safetensors')).size;

  // 1. roofline, at the shapes the model runs (rows × hidden → intermediate).
  const roof = Math.max(await roofline(2048, 512, 1408), await roofline(2048, 1408, 512));
  console.log(`\n1. MatMul roofline: ${fmt(roof)} GFLOP/s (best of [2048×512]·[512×1408] and [2048×1408]·[1408×512])`);

  // 4a. load: session creation and memory.
  const rssBefore = rssMiB();
  const engine = await Engine.load(dir, { threads });
  const rssAfter = rssMiB();
  const params = weightBytes / 4;
  console.log(`\n4. model: ${fmt(params / 1e6)} M parameters, ${fmt(weightBytes / 2 ** 20)} MiB of f32 weights`);
  console.log(
    `   session creation ${fmt(engine.info.sessionSeconds, 2)} s; RSS +${fmt(rssAfter - rssBefore)} MiB at load (MatMul weights are prepacked; the embedding stays memory-mapped)`,
  );

  // 2. throughput: B rows × T tokens, every position scored.
  const B = 8;
  const T = 256;
  const rows = Array.from({ length: B }, (_, b) => ({ tokens: randomIds(100 + b, T), startPosition: 0, pastRow: 0 }));
  const scored = rows.flatMap((r, row) => r.tokens.slice(1).map((target, index) => ({ row, index, target })));
  const fwd = await timeIt(() => engine.forward({ rows, scored, topK: 0, keepPresent: false }), quick ? 1 : 3);
  const flops = B * modelFlops(T, T - 1);
  console.log(`\n2. scoring ${B}×${T} tokens: ${fmt((B * T) / fwd, 0)} tokens/s, ${fmt(flops / fwd / 1e9)} GFLOP/s of model FLOPs`);
  console.log(`   model-FLOP utilisation: ${fmt((100 * flops) / fwd / 1e9 / roof)}% of the MatMul roofline (target ≥ 70%)`);

  // 3. CHARPEval-shaped workload.
  const contexts = quick ? 2 : 4;
  const requests: LoglikelihoodRequest[] = charpevalItems(contexts);
  const items = contexts * 6;
  const unshared = new Scorer(engine, { prefixSharing: false });
  const shared = new Scorer(engine, { prefixCacheBytes: 0 }) // sharing within a round only: runs repeat the same items;
  const oneAtATime = await timeIt(async () => {
    for (const r of requests)
      for (const cont of r.continuations) await directScoring(unshared).loglikelihood([{ context: r.context, continuations: [cont] }]);
  }, 1);
  const batched = await timeIt(() => directScoring(unshared).loglikelihood(requests), 1);
  const prefixShared = await timeIt(() => directScoring(shared).loglikelihood(requests), quick ? 1 : 2);
  const a = await directScoring(unshared).loglikelihood(requests);
  const b = await directScoring(shared).loglikelihood(requests);
  let maxDiff = 0;
  a.forEach((conts, i) =>
    conts.forEach((c, j) => c.tokenLogprobs.forEach((lp, k) => (maxDiff = Math.max(maxDiff, Math.abs(lp - b[i]![j]!.tokenLogprobs[k]!))))),
  );
  console.log(`\n3. CHARPEval-shaped: ${contexts} contexts × 6 continuations (400 + 30 tokens), ${items} items`);
  const line = (name: string, s: number) =>
    console.log(
      `   ${name.padEnd(24)} ${fmt(s, 2).padStart(7)} s  ${fmt(items / s, 2).padStart(7)} items/s  ${fmt(oneAtATime / s, 2).padStart(5)}x`,
    );
  line('one sequence at a time', oneAtATime);
  line('batched', batched);
  line('batched + prefix sharing', prefixShared);
  console.log(`   prefix-shared vs unshared log-probs: max |Δ| = ${maxDiff.toExponential(2)}`);

  console.log(`\n4b. peak RSS of the run: ${fmt(peakRssMiB())} MiB`);
  await engine.release();
}

await main();
