// Probe benchmark: prints figures, asserts nothing. On the benchmark model, for one
// 2048-token dialogue of 12 rounds, in one run: plain scoring time (the last response as
// a continuation of the rest) against probe time (chunk votes + mass + heatmap in the
// graph), and the probe's peak memory against what returning full attention would need.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { Prober } from '../src/requests/probe.js';
import { BENCH_MODEL, benchModelDir, randomIds } from './model.js';
import { directScoring } from '../src/requests/scoring.js';

const threads = Number(process.env.BENCH_THREADS ?? 0) || os.cpus().length;
const T = 2048;
const rounds = 12;
const fmt = (x: number, d = 2) => x.toFixed(d);
const mib = (bytes: number) => bytes / 2 ** 20;
// VmHWM, not getrusage's maxRSS: Linux carries maxRSS over from the parent into a
// spawned child, while VmHWM belongs to the process's own address space.
const peakMiB = () => Number(/VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'))![1]) / 1024;

const engine = await Engine.load(benchModelDir(), { threads });

// `--memory score|probe`: one pass in a fresh process, printing its peak RSS (MiB)
// before and after, so neither the other session nor arena growth over repeated runs
// blurs the figure.
const memoryMode = process.argv[2] === '--memory' ? process.argv[3] : undefined;
const ids = randomIds(777, T);
const per = Math.floor(T / rounds);
const chunkIds = Array.from({ length: rounds }, (_, r) => ({
  label: r === 0 ? 'system' : `${r % 2 ? 'user' : 'assistant'}#${Math.ceil(r / 2)}`,
  ids: ids.slice(r * per, r === rounds - 1 ? T : (r + 1) * per),
}));
const last = chunkIds[rounds - 1]!.ids;

const scorer = new Scorer(engine, { prefixCacheBytes: 0 }) // repeated runs of one text: measure passes, not hits;
const prober = new Prober(engine);
if (memoryMode) {
  const before = peakMiB();
  if (memoryMode === 'probe') await prober.probe([{ chunkIds, excludePositions: [0] }]);
  else await directScoring(scorer).loglikelihood([{ context: ids.slice(0, T - last.length), continuations: [last] }]);
  console.log(JSON.stringify({ before, after: peakMiB() }));
  process.exit(0);
}
const score = () => directScoring(scorer).loglikelihood([{ context: ids.slice(0, T - last.length), continuations: [last] }]);
const rolling = () => directScoring(scorer).rolling([{ text: ids }]);
const probe = () => prober.probe([{ chunkIds, excludePositions: [0] }]);
const seconds = async (fn: () => Promise<unknown>) => {
  const t = performance.now();
  await fn();
  return (performance.now() - t) / 1000;
};
// Warm up each, then interleave the three so machine noise falls on all alike; medians.
await score();
await rolling();
await probe();
const runs = { score: [] as number[], rolling: [] as number[], probe: [] as number[] };
for (let i = 0; i < 5; i++) {
  runs.score.push(await seconds(score));
  runs.rolling.push(await seconds(rolling));
  runs.probe.push(await seconds(probe));
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const scoreSeconds = median(runs.score);
const rollingSeconds = median(runs.rolling);
const probeSeconds = median(runs.probe);
const full = BENCH_MODEL.layers * BENCH_MODEL.heads * T * T * 4;

console.log(
  `ctxprobe probe benchmark — ${T}-token dialogue, ${rounds} rounds, ${threads} thread(s), model: hidden ${BENCH_MODEL.hidden}, ${BENCH_MODEL.layers} layers, ${BENCH_MODEL.heads} heads`,
);
console.log(`   (medians of 5 interleaved runs)`);
console.log(`   plain scoring, last round as continuation    ${fmt(scoreSeconds)} s`);
console.log(`   plain scoring, every token (rolling)         ${fmt(rollingSeconds)} s`);
console.log(
  `   probe (votes + mass + heatmaps, in graph)    ${fmt(probeSeconds)} s   ${fmt(probeSeconds / scoreSeconds)}x continuation scoring, ${fmt(probeSeconds / rollingSeconds)}x rolling (target ≤ 1.5x)`,
);
const self = fileURLToPath(import.meta.url);
const measure = (mode: string) =>
  JSON.parse(
    execFileSync(process.execPath, ['--import', 'tsx', self, '--memory', mode], { encoding: 'utf8' }).trim().split('\n').pop()!,
  ) as { before: number; after: number };
const scoreMem = measure('score');
const probeMem = measure('probe');
console.log(
  `   peak RSS of one pass in a fresh process: scoring ${fmt(scoreMem.after, 0)} MiB (+${fmt(scoreMem.after - scoreMem.before, 0)} over the loaded model),`,
);
console.log(
  `     probing ${fmt(probeMem.after, 0)} MiB (+${fmt(probeMem.after - probeMem.before, 0)}; the same session, so no second copy of the weights)`,
);
console.log(
  `   full attention (layers × heads × T × T × f32) would be ${fmt(mib(full), 0)} MiB to build and ship; one layer's is ${fmt(mib(full / BENCH_MODEL.layers), 0)} MiB`,
);
await engine.release();
