// Mixture-of-experts benchmark: a Mixtral-shaped model (the bench model's attention, 8
// experts of 704, 2 per token) against a dense model with the same active parameters
// (one MLP of 1408) — tokens/s of scoring 8 × 256 tokens, every position scored, and of
// CHARPEval-shaped rows, measured alternately in one run. Prints figures, asserts nothing.
import os from 'node:os';
import { Engine } from '../src/engine/engine.js';
import { benchModelDir, randomIds } from './model.js';

const threads = Number(process.env.BENCH_THREADS ?? 0) || os.cpus().length;
const fmt = (x: number, d = 1) => x.toFixed(d);

const dense = await Engine.load(benchModelDir(), { threads });
const moe = await Engine.load(
  benchModelDir(
    { family: 'mixtral', intermediate: 704, extraConfig: { num_local_experts: 8, num_experts_per_tok: 2 } },
    'ctxprobe-bench-mixtral-8x704',
  ),
  { threads },
);

async function tokensPerSecond(engine: Engine, B: number, T: number): Promise<number> {
  const rows = Array.from({ length: B }, (_, b) => ({ tokens: randomIds(100 + b, T), startPosition: 0, pastRow: 0 }));
  const scored = rows.flatMap((r, row) => r.tokens.slice(1).map((target, index) => ({ row, index, target })));
  const t = performance.now();
  await engine.forward({ rows, scored, topK: 0, keepPresent: false });
  return (B * T) / ((performance.now() - t) / 1000);
}

console.log(`ctxprobe MoE benchmark — ${threads} thread(s); Mixtral-shaped (8 experts × 704, top 2) vs dense (MLP 1408), same attention`);
for (const [B, T] of [
  [8, 256],
  [1, 512],
  [6, 32],
] as const) {
  await tokensPerSecond(dense, B, T); // warm-up
  await tokensPerSecond(moe, B, T);
  const d: number[] = [];
  const m: number[] = [];
  for (let r = 0; r < 3; r++) {
    d.push(await tokensPerSecond(dense, B, T));
    m.push(await tokensPerSecond(moe, B, T));
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[1]!;
  console.log(
    `   ${B}×${T} tokens: dense ${fmt(median(d), 0)} tokens/s, MoE ${fmt(median(m), 0)} tokens/s — MoE ÷ dense = ${fmt(median(m) / median(d), 2)} (target ≥ 0.6)`,
  );
}
console.log(`   graph nodes: dense ${dense.info.graphNodes}, MoE ${moe.info.graphNodes}`);
await dense.release();
await moe.release();
