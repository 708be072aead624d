// Long-context benchmark: prints figures, asserts nothing. On the benchmark model with a
// 32k context (positions only differ), each in a fresh process: rolling scoring of a
// T-token text and continuation scoring of a (T − 256)-token context with a 256-token
// continuation, for T = 2k, 8k, 16k, 32k — time and peak RSS above the loaded model; and
// a 12-round dialogue of T tokens probed (votes, mass, pooled max heatmap, the last round
// as the query). Rows longer than --max-batch-tokens (512 on CPU) run in query blocks,
// probe rows as score rows (one planner; one attention limit per layer, 192 MiB).
//
//   BENCH_MODES=probe      what runs beside rolling scoring (default continuation,probe);
//   BENCH_LONG=2048,8192   sizes; BENCH_MALLOC=dynamic   glibc's default malloc;
//   BENCH_ATTENTION_MIB=N  the scorer's attention bound per layer (default 192)
//   BENCH_PROBE_ATTENTION_MIB=N  the attention bound of the prober's own scorer (default 192)
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
const dir = () => benchModelDir({ maxPositions: 32768 }, 'ctxprobe-bench-llama-56m-32k');
const status = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+) kB`).exec(fs.readFileSync('/proc/self/status', 'utf8'))![1]) / 1024;

if (process.argv[2] === '--child') {
  const [mode, T] = [process.argv[3]!, Number(process.argv[4])];
  const engine = await Engine.load(dir(), { threads });
  const attention = Number(process.env.BENCH_ATTENTION_MIB ?? 0);
  const scorer = new Scorer(engine, { prefixCacheBytes: 0, ...(attention > 0 ? { maxAttentionBytes: attention * 2 ** 20 } : {}) }) // one request: its KV is not kept for later ones;
  const loaded = status('VmRSS');
  const ids = randomIds(T, T);
  const t = performance.now();
  if (mode === 'rolling') await directScoring(scorer).rolling([{ text: ids }]);
  else if (mode === 'probe') {
    const per = Math.floor(T / 12);
    const chunkIds = Array.from({ length: 12 }, (_, r) => ({ label: `round#${r + 1}`, ids: ids.slice(r * per, r === 11 ? T : (r + 1) * per) }));
    const probeAttention = Number(process.env.BENCH_PROBE_ATTENTION_MIB ?? 0);
    await new Prober(engine, probeAttention > 0 ? { maxAttentionBytes: probeAttention * 2 ** 20 } : {}).probe([{ chunkIds, excludePositions: [0] }], { pool: 'max' });
  } else await directScoring(scorer).loglikelihood([{ context: ids.slice(0, T - 256), continuations: [ids.slice(T - 256)] }]);
  console.log(JSON.stringify({ seconds: (performance.now() - t) / 1000, aboveLoaded: status('VmHWM') - loaded }));
  await engine.release();
  process.exit(0);
}

dir();
const sizes = (process.env.BENCH_LONG ?? '2048,8192,16384,32768').split(',').map(Number);
// Children run as `npm start` and the images run the server: glibc's mmap threshold fixed
// at 1 MiB (BENCH_MALLOC=dynamic: glibc's default, for comparison).
const modes = (process.env.BENCH_MODES ?? 'continuation,probe').split(',');
const dynamic = process.env.BENCH_MALLOC === 'dynamic';
const childEnv = { ...process.env };
if (dynamic) delete childEnv.MALLOC_MMAP_THRESHOLD_;
else childEnv.MALLOC_MMAP_THRESHOLD_ ??= '1048576';
console.log(
  `ctxprobe long-context benchmark — ${threads} thread(s); peak RSS above the loaded model, MiB; malloc: ${dynamic ? "glibc's dynamic mmap threshold" : `MALLOC_MMAP_THRESHOLD_=${childEnv.MALLOC_MMAP_THRESHOLD_}`}`,
);
console.log('   tokens   rolling s   rolling MiB   continuation s   continuation MiB   probe s   probe MiB   probe ÷ rolling time');
for (const T of sizes) {
  const run = (mode: string) => {
    const out = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--child', mode, String(T)], { encoding: 'utf8', env: childEnv });
    return JSON.parse(out.stdout.trim().split('\n').at(-1)!) as { seconds: number; aboveLoaded: number };
  };
  const skipped = { seconds: NaN, aboveLoaded: NaN };
  const r = run('rolling');
  const c = modes.includes('continuation') ? run('continuation') : skipped;
  const p = modes.includes('probe') ? run('probe') : skipped;
  console.log(
    `   ${String(T).padStart(6)}   ${r.seconds.toFixed(1).padStart(9)}   ${r.aboveLoaded.toFixed(0).padStart(11)}   ${c.seconds.toFixed(1).padStart(14)}   ${c.aboveLoaded.toFixed(0).padStart(16)}   ${p.seconds.toFixed(1).padStart(7)}   ${p.aboveLoaded.toFixed(0).padStart(9)}   ${(p.seconds / r.seconds).toFixed(2).padStart(20)}`,
  );
}
