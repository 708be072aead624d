// Memory benchmark: prints figures, asserts nothing. Does RSS come back to near the
// working set after large requests? For each onnxruntime CPU memory-arena setting, in a
// fresh process on the benchmark model: RSS after load, peak and settled RSS after a
// 4 × 2048-token probe, then after a 4 × 2048-token rolling score, and the time of each;
// and, arena off, a process that only scores, for the RSS of one that also probed
// (scoring and probing share one session and one copy of the weights).
// Children run with glibc's mmap threshold fixed, as `npm start` and the images run the server.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { Prober } from '../src/requests/probe.js';
import { benchModelDir, randomIds } from './model.js';
import { directScoring } from '../src/requests/scoring.js';

const threads = Number(process.env.BENCH_THREADS ?? 0) || os.cpus().length;
const mib = (bytes: number) => bytes / 2 ** 20;
const status = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+) kB`).exec(fs.readFileSync('/proc/self/status', 'utf8'))![1]) / 1024;
const settle = () => new Promise((r) => setTimeout(r, 1500));

if (process.argv[2] === '--child') {
  const arena = process.argv[3] === 'on';
  const probes = process.argv[4] !== 'scoring-only';
  const engine = await Engine.load(benchModelDir(), { threads, cpuMemArena: arena });
  const prober = new Prober(engine);
  const scorer = new Scorer(engine, { prefixCacheBytes: 0 }) // RSS after requests, without a cache's keep;
  const loaded = status('VmRSS');
  const ids = (seed: number) => randomIds(seed, 2048);
  const samples = [1, 2, 3, 4].map((s) => ({
    chunkIds: Array.from({ length: 8 }, (_, r) => ({ label: `r${r}`, ids: ids(s).slice(r * 256, (r + 1) * 256) })),
  }));
  let t = performance.now();
  if (probes) await prober.probe(samples);
  const probeSeconds = (performance.now() - t) / 1000;
  const probePeak = status('VmHWM');
  await settle();
  const afterProbe = status('VmRSS');
  t = performance.now();
  await directScoring(scorer).rolling([1, 2, 3, 4].map((s) => ({ text: ids(s + 10) })));
  const rollingSeconds = (performance.now() - t) / 1000;
  await settle();
  const afterRolling = status('VmRSS');
  console.log(
    JSON.stringify({
      loaded,
      probePeak,
      afterProbe,
      afterRolling,
      probeSeconds,
      rollingSeconds,
      heap: mib(process.memoryUsage().heapUsed),
    }),
  );
  await engine.release();
  process.exit(0);
}

console.log(`ctxprobe memory benchmark — ${threads} thread(s); RSS in MiB, fresh process per setting`);
console.log('   arena   loaded   probe peak   after probe   after rolling   probe s   rolling s');
const env = { ...process.env, MALLOC_MMAP_THRESHOLD_: process.env.MALLOC_MMAP_THRESHOLD_ ?? '1048576' };
const after: Record<string, number> = {};
for (const [arena, mode] of [
  ['on', 'probe'],
  ['off', 'probe'],
  ['off', 'scoring-only'],
]) {
  const run = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--child', arena!, mode!], { encoding: 'utf8', env });
  const line = run.stdout.trim().split('\n').at(-1)!;
  const r = JSON.parse(line);
  const f = (x: number) => x.toFixed(0).padStart(6);
  if (arena === 'off') after[mode!] = r.afterRolling;
  console.log(
    `   ${(arena + (mode === 'probe' ? '' : ', no probe')).padEnd(5)} ${f(r.loaded)}   ${f(r.probePeak)}       ${f(r.afterProbe)}        ${f(r.afterRolling)}     ${r.probeSeconds.toFixed(2)}      ${r.rollingSeconds.toFixed(2)}`,
  );
}
console.log(`   RSS after scoring and probing ÷ after scoring only (arena off): ${(after.probe! / after['scoring-only']!).toFixed(2)} (target ≤ 1.15)`);
