// `--quantize` at load against the same checkpoint's plain load: a BF16 checkpoint of
// Llama-3.2-1B's width (hidden 2048, 32 heads / 8 KV heads, MLP 8192, vocabulary 128256) with
// LAYERS layers (default 4), random weights, loaded in a process of its own each time, the
// weights cache off (a first start). Prints the load's seconds and the ratio; asserts nothing.
//   npx tsx bench/quantize-load.ts [LAYERS]
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const layers = Number(process.argv[2] ?? 4);

async function side(dir: string, quantize: string): Promise<void> {
  const { Engine } = await import('../src/engine/engine.js');
  const started = performance.now();
  const engine = await Engine.load(dir, { threads: 2, ...(quantize !== 'none' && { quantize: quantize as 'q4_k' }) });
  const seconds = (performance.now() - started) / 1000;
  console.log(JSON.stringify({ quantize, seconds, rssMiB: Math.round(process.memoryUsage().rss / 2 ** 20) }));
  await engine.release();
}

async function main(): Promise<void> {
  if (process.argv[2] === '--side') return side(process.argv[3]!, process.argv[4]!);
  const { writeSyntheticCheckpoint } = await import('../src/model/synthetic.js');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxprobe-quantize-load-'));
  try {
    const spec = {
      family: 'llama',
      hidden: 2048,
      layers,
      heads: 32,
      kvHeads: 8,
      intermediate: 8192,
      vocab: 128256,
      maxPositions: 4096,
      tied: true,
      seed: 3,
    };
    let t = performance.now();
    writeSyntheticCheckpoint(dir, spec, { dtype: 'bfloat16' });
    console.log(`checkpoint: ${layers} layers at 1B width, BF16, written in ${((performance.now() - t) / 1000).toFixed(1)} s`);
    const self = fileURLToPath(import.meta.url);
    const runs: Record<string, number[]> = {};
    for (let round = 0; round < 2; round++)
      for (const quantize of ['none', 'q8_0', 'q4_k']) {
        t = performance.now();
        const r = spawnSync(process.execPath, ['--import', 'tsx', self, '--side', dir, quantize], {
          encoding: 'utf8',
          env: { ...process.env, CTXPROBE_WEIGHTS_CACHE_MIN_BYTES: String(2 ** 50) },
        });
        const line = r.stdout.trim().split('\n').at(-1) ?? '';
        if (r.status !== 0 || !line.startsWith('{')) throw new Error(`${quantize}: ${r.stderr.slice(-2000)}`);
        const { seconds, rssMiB } = JSON.parse(line) as { seconds: number; rssMiB: number };
        (runs[quantize] ??= []).push(seconds);
        console.log(`${quantize.padEnd(5)} load ${seconds.toFixed(1)} s, RSS ${rssMiB} MiB`);
      }
    const best = (q: string) => Math.min(...runs[q]!);
    for (const q of ['q8_0', 'q4_k'])
      console.log(
        `--quantize ${q}: ${best(q).toFixed(1)} s against ${best('none').toFixed(1)} s plain (${(best(q) / best('none')).toFixed(2)}x, best of 2)`,
      );
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

await main();
