// Weights on the device (WebGPU, lavapipe: the device's memory is the process's, so RSS
// shows it): prints figures, asserts nothing. In a fresh process with glibc's mmap threshold
// fixed (as `npm start` runs the server), float32 models of 830 MiB and 1.9 GB: peak RSS
// during the load, RSS after it, after a scoring pass, after the first probe (which makes
// the probe session), and what the session thread says it holds on the device; each also
// net of what the same load costs for a model of almost no weights (the runtime's code and
// kernels: about 150 MiB, which no model's size changes). Run it at two commits to compare
// (`deviceWeights` is printed where the engine has it). Then the small shape as a BF16
// checkpoint, widened at load and kept as stored (`--weights-at-rest`): what the device
// holds, RSS after the load, and a 64-token scoring pass (median of 3).
//   npx tsx bench/device-weights.ts      (BENCH_VOCAB=4000: a smaller embedding and head)
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { writeSyntheticCheckpoint } from '../src/model/synthetic.js';
import { fileURLToPath } from 'node:url';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { Prober } from '../src/requests/probe.js';
import { directScoring } from '../src/requests/scoring.js';
import { BENCH_MODEL, benchModelDir, randomIds } from './model.js';

const SPEC = { hidden: 1024, layers: 10, heads: 16, kvHeads: 4, intermediate: 4096, vocabSize: Number(process.env.BENCH_VOCAB ?? 32000), tied: false } as const;
const SHAPES = {
  small: SPEC,
  // 1.9 GB (the safetensors writer takes one buffer under 2 GiB).
  large: { ...SPEC, hidden: 2048, layers: 7, intermediate: 8192, vocabSize: 16000 },
  // The runtime's own cost: a model of almost no weights.
  none: { ...SPEC, hidden: 64, heads: 4, kvHeads: 2, intermediate: 128, vocabSize: 256 },
} as const;
const shapeDir = (name: keyof typeof SHAPES) => {
  const spec = SHAPES[name];
  return benchModelDir(spec, name === 'small' ? `ctxprobe-bench-device-weights-${spec.vocabSize}` : `ctxprobe-bench-device-weights-${name}`);
};
const status = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+) kB`).exec(fs.readFileSync('/proc/self/status', 'utf8'))![1]) / 1024;
const settle = () => new Promise((r) => setTimeout(r, 1500));

if (process.argv[2] === '--child') {
  const shape = process.argv[3] as keyof typeof SHAPES;
  const dir = shapeDir(shape);
  const vocab = SHAPES[shape].vocabSize;
  const weights = fs.readdirSync(dir).filter((f) => f.endsWith('.safetensors')).reduce((n, f) => n + fs.statSync(`${dir}/${f}`).size, 0) / 2 ** 20;
  const base = status('VmRSS');
  const t = performance.now();
  const engine = await Engine.load(dir, { device: 'webgpu', threads: 2 });
  const loadSeconds = (performance.now() - t) / 1000;
  const loadPeak = status('VmHWM');
  await settle();
  const loaded = status('VmRSS');
  const ids = (seed: number, n: number) => randomIds(seed, n, vocab);
  await directScoring(new Scorer(engine, { prefixCacheBytes: 0 })).loglikelihood([{ context: ids(1, 200), continuations: [ids(2, 8)] }]);
  await settle();
  const scored = status('VmRSS');
  await new Prober(engine).probe([{ chunkIds: [0, 1, 2, 3].map((r) => ({ label: `r${r}`, ids: ids(3 + r, 50) })) }]);
  await settle();
  const probed = status('VmRSS');
  const device = 'deviceWeights' in engine ? await (engine as Engine).deviceWeights() : undefined;
  console.log(JSON.stringify({ weights, base, loadSeconds, loadPeak, loaded, scored, probed, device }));
  await engine.release();
  process.exit(0);
}

const BF16_DIR = path.join(os.tmpdir(), 'ctxprobe-bench-device-weights-bf16');
if (process.argv[2] === '--bf16') {
  const dir = BF16_DIR;
  const weightsAtRest = process.argv[3] as 'stored' | 'compute';
  const base = status('VmRSS');
  const t = performance.now();
  const engine = await Engine.load(dir, { device: 'webgpu', threads: 2, weightsAtRest });
  const loadSeconds = (performance.now() - t) / 1000;
  await settle();
  const loaded = status('VmRSS') - base;
  const scoring = directScoring(new Scorer(engine, { prefixCacheBytes: 0, prefixSharing: false }));
  const times: number[] = [];
  for (let i = 0; i < 4; i++) {
    const s = performance.now();
    await scoring.loglikelihood([{ context: randomIds(10 + i, 56, 32000), continuations: [randomIds(20 + i, 8, 32000)] }]);
    if (i > 0) times.push((performance.now() - s) / 1000);
  }
  times.sort((a, b) => a - b);
  console.log(JSON.stringify({ weightsAtRest, loadSeconds, loaded, pass: times[1], device: await engine.deviceWeights() }));
  await engine.release();
  process.exit(0);
}

const run = (args: string[]) => {
  const child = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), ...args], {
    env: { ...process.env, MALLOC_MMAP_THRESHOLD_: '1048576' },
    encoding: 'utf8',
  });
  const line = child.stdout.split('\n').find((l) => l.startsWith('{'));
  if (!line) throw new Error(`child failed: ${child.stderr.slice(-2000)}`);
  return JSON.parse(line);
};
for (const name of Object.keys(SHAPES) as (keyof typeof SHAPES)[]) shapeDir(name);
if (!fs.existsSync(path.join(BF16_DIR, 'model.safetensors'))) writeSyntheticCheckpoint(BF16_DIR, { ...BENCH_MODEL, ...SPEC }, { dtype: 'bfloat16' });
const none = run(['--child', 'none']);
const fixed = { loadPeak: none.loadPeak - none.base, loaded: none.loaded - none.base, scored: none.scored - none.base, probed: none.probed - none.base };
console.log(
  `ctxprobe device weights (WebGPU on lavapipe); RSS above the process before the load, in the weights' size (net: less the same for a model of ${(none.weights).toFixed(1)} MiB, ${fixed.loadPeak.toFixed(0)} MiB at its peak)`,
);
for (const shape of ['small', 'large'] as const) {
  const r = run(['--child', shape]);
  const x = (v: number, key: keyof typeof fixed) => `${((v - r.base) / r.weights).toFixed(2)}x (net ${((v - r.base - fixed[key]) / r.weights).toFixed(2)}x)`;
  console.log(`  float32 weights ${r.weights.toFixed(0)} MiB: load ${r.loadSeconds.toFixed(1)} s; peak during the load ${x(r.loadPeak, 'loadPeak')}; after it ${x(r.loaded, 'loaded')}`);
  console.log(`    after a scoring pass ${x(r.scored, 'scored')}; after the first probe ${x(r.probed, 'probed')}`);
  if (r.device) console.log(`    on the device for every session: ${r.device.tensors} tensors, ${(r.device.bytes / 2 ** 20).toFixed(0)} MiB`);
}

console.log('the same shape in BF16 (2 threads), widened at load against kept as stored:');
for (const how of ['compute', 'stored']) {
  const b = run(['--bf16', how]);
  console.log(
    `  ${how === 'stored' ? 'kept as stored  ' : 'widened at load '}: on the device ${(b.device.bytes / 2 ** 20).toFixed(0)} MiB, RSS after the load +${b.loaded.toFixed(0)} MiB, load ${b.loadSeconds.toFixed(1)} s, a 64-token pass ${(b.pass * 1000).toFixed(0)} ms`,
  );
}
