// Chunk attribution benchmark: 20 CHARPEval-shaped samples × (every chunk removed + every
// chunk masked + CHARP's history sweep h ∈ {0, 1, 2, 3, all}, both interventions) as one
// attribution job (variants share their unchanged prefix through the prefix cache)
// against the same variants scored with prefix sharing off (one batched call: the
// strongest cache-off baseline, independent requests could only batch as well). Zero-shot
// (the sample alone) and 3-shot (an 800-token instruction + demonstrations chunk the
// samples share, as CHARPEval's few-shot prompt). Prints figures, asserts nothing.
//
//   BENCH_ATTR_SAMPLES=N   samples per setting (default 20)
import os from 'node:os';
import { Engine } from '../src/engine/engine.js';
import { prepareAttribution, type AttributionSample } from '../src/requests/attribution.js';
import { Scorer } from '../src/core/scorer.js';
import { benchModelDir, randomIds } from './model.js';

const threads = Number(process.env.BENCH_THREADS ?? 0) || os.cpus().length;
const count = Number(process.env.BENCH_ATTR_SAMPLES ?? 20);
const engine = await Engine.load(benchModelDir(), { threads });

/** instruction (+ demos), six 30-token history turns, the last user turn, the knowledge, the response. */
function sample(i: number, instruction: number[]): AttributionSample {
  const s = 5000 + 100 * i;
  return {
    chunkIds: [
      { label: 'instruction', ids: instruction },
      ...Array.from({ length: 6 }, (_, k) => ({ label: 'history', ids: randomIds(s + k, 30) })),
      { label: 'user', ids: randomIds(s + 10, 20) },
      { label: 'knowledge', ids: randomIds(s + 11, 100) },
      { label: 'response', ids: randomIds(s + 12, 25) },
    ],
  };
}

const ALL = 2 ** 31 - 1;
console.log(`ctxprobe attribution benchmark — ${threads} thread(s), 56M bench model, ${count} samples per setting`);
for (const [setting, instruction] of [
  ['zero-shot (60-token instruction)', randomIds(4000, 60)],
  ['3-shot (800-token instruction + demonstrations, shared)', randomIds(4001, 800)],
] as const) {
  const samples = Array.from({ length: count }, (_, i) => sample(i, instruction));
  const prepared = await prepareAttribution(engine, samples, { historySweep: [0, 1, 2, 3, ALL] });
  const units = prepared.units;
  const shared = new Scorer(engine);
  const unshared = new Scorer(engine, { prefixSharing: false });
  let t = performance.now();
  const a = await shared.scoreUnits(units);
  const sharedSeconds = (performance.now() - t) / 1000;
  t = performance.now();
  const b = await unshared.scoreUnits(units);
  const unsharedSeconds = (performance.now() - t) / 1000;
  let maxDelta = 0;
  a.scores.forEach((s, i) => s.logprobs.forEach((lp, j) => (maxDelta = Math.max(maxDelta, Math.abs(lp - b.scores[i]!.logprobs[j]!)))));
  const answers = prepared.finish(a.scores);
  const meanBy = (label: string, v: 'remove' | 'mask') => {
    const d = answers.flatMap((x) => x.chunks.filter((c) => c.label === label).map((c) => c[v]!.delta));
    return d.reduce((x, y) => x + y, 0) / d.length;
  };
  console.log(`\n${setting}: ${units.length} variants (${units.length / count} per sample), ${a.work.tokensRequested} tokens requested`);
  console.log(`  shared job:   ${sharedSeconds.toFixed(1)} s, ${a.work.tokensComputed} tokens computed (computed ÷ requested ${(a.work.tokensComputed / a.work.tokensRequested).toFixed(3)})`);
  console.log(`  sharing off:  ${unsharedSeconds.toFixed(1)} s, ${b.work.tokensComputed} tokens computed`);
  console.log(`  speed-up ${(unsharedSeconds / sharedSeconds).toFixed(2)}x; max |Δ| of a target token log-prob ${maxDelta.toExponential(1)}`);
  console.log(`  mean Δ (nats) remove/mask: knowledge ${meanBy('knowledge', 'remove').toFixed(2)}/${meanBy('knowledge', 'mask').toFixed(2)}, history ${meanBy('history', 'remove').toFixed(2)}/${meanBy('history', 'mask').toFixed(2)}`);
}
await engine.release();
