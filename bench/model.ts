// The benchmark model: Llama-shaped, ~56M parameters (hidden 512, 8 layers, 8 query /
// 4 key-value heads, intermediate 1408, vocabulary 32000), random weights, generated once.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { writeSyntheticCheckpoint, rng, type SyntheticSpec } from '../src/model/synthetic.js';

export const BENCH_MODEL: SyntheticSpec = {
  family: 'llama',
  hidden: 512,
  layers: 8,
  heads: 8,
  kvHeads: 4,
  intermediate: 1408,
  vocab: 300,
  vocabSize: 32000,
  maxPositions: 2048,
  seed: 7,
  scale: 0.1,
};

/** The benchmark model, or a variant of it (its own folder), generated once. */
export function benchModelDir(variant: Partial<SyntheticSpec> = {}, name = 'ctxprobe-bench-llama-56m'): string {
  const dir = path.join(os.tmpdir(), name);
  if (!fs.existsSync(path.join(dir, 'model.safetensors'))) {
    const t = performance.now();
    writeSyntheticCheckpoint(dir, { ...BENCH_MODEL, ...variant });
    console.log(`generated the benchmark checkpoint in ${((performance.now() - t) / 1000).toFixed(1)} s (${dir})`);
  }
  return dir;
}

export function randomIds(seed: number, n: number, vocab = BENCH_MODEL.vocabSize!): number[] {
  const r = rng(seed);
  return Array.from({ length: n }, () => 3 + Math.floor(r() * (vocab - 3)));
}

/** CHARPEval-shaped items: a 400-token context and six 30-token continuations each. */
export function charpevalItems(count: number, seed = 1000): { context: number[]; continuations: number[][] }[] {
  return Array.from({ length: count }, (_, c) => ({
    context: randomIds(seed + c, 400),
    continuations: Array.from({ length: 6 }, (_, k) => randomIds(seed * 2 + 10 * c + k, 30)),
  }));
}
