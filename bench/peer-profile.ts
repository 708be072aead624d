// Where the peer benchmark's time goes on ctxprobe's side (bench/peer.ts's workloads, the
// same model and scorer settings): the wall time of the run, the time the engine's passes
// took on the session thread (Engine.onPass) and what is left around them (planning,
// feeds, outputs, the runner), then onnxruntime's own profile of the passes: each op type's
// share of their time. Prints figures, asserts nothing.
//   npx tsx bench/peer-profile.ts [mc|rolling]          BENCH_ITEMS=4 BENCH_TEXTS=4
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { benchModelDir, charpevalItems, randomIds } from './model.js';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { directScoring } from '../src/requests/scoring.js';

const workload = process.argv[2] === 'rolling' ? 'rolling' : 'mc';
const ITEMS = Number(process.env.BENCH_ITEMS ?? 4);
const TEXTS = Number(process.env.BENCH_TEXTS ?? 4);
const prefix = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'ctxprobe-peer-profile-')), 'run');
const profile = process.env.BENCH_PROFILE !== '0';
const engine = await Engine.load(benchModelDir(), { threads: 2, ...(profile && { profilePrefix: prefix }) });
const scorer = new Scorer(engine, { prefixCacheBytes: 0 });
const scoring = directScoring(scorer);
const run = () =>
  workload === 'mc'
    ? scoring.loglikelihood(charpevalItems(ITEMS) as never)
    : scoring.rolling(Array.from({ length: TEXTS }, (_, k) => ({ text: randomIds(7000 + k, 1024) })));
// Warm up on other tokens, as the peer benchmark does.
await (workload === 'mc' ? scoring.loglikelihood(charpevalItems(1, 4242) as never) : scoring.rolling([{ text: randomIds(99, 1024) }]));
let passSeconds = 0;
let passes = 0;
let tokens = 0;
engine.onPass((p) => {
  passSeconds += p.seconds;
  passes++;
  tokens += p.tokens;
});
const t = performance.now();
await run();
const seconds = (performance.now() - t) / 1000;
console.log(
  JSON.stringify({
    workload,
    seconds: +seconds.toFixed(3),
    passes,
    paddedTokens: tokens,
    passSeconds: +passSeconds.toFixed(3),
    around: +(seconds - passSeconds).toFixed(3),
  }),
);
await engine.release();
if (profile) {
  type Event = { cat: string; name: string; ts: number; dur: number; args?: { op_name?: string } };
  const events = fs
    .readdirSync(path.dirname(prefix))
    .flatMap((f) => JSON.parse(fs.readFileSync(path.join(path.dirname(prefix), f), 'utf8')) as Event[]);
  const runs = events.filter((e) => e.cat === 'Session' && e.name === 'model_run').slice(-passes);
  const from = runs[0]!.ts;
  const nodes = events.filter((e) => e.cat === 'Node' && e.name.endsWith('_kernel_time') && e.ts >= from);
  const byOp = new Map<string, number>();
  const byNode = new Map<string, number>();
  for (const n of nodes) {
    byOp.set(n.args?.op_name ?? '?', (byOp.get(n.args?.op_name ?? '?') ?? 0) + n.dur / 1e6);
    const key = n.name.replace(/_kernel_time$/, '').replace(/layers\.\d+\//, 'layers.*/');
    byNode.set(key, (byNode.get(key) ?? 0) + n.dur / 1e6);
  }
  const total = [...byOp.values()].reduce((a, b) => a + b, 0);
  const runSeconds = runs.reduce((n, r) => n + r.dur / 1e6, 0);
  console.log(`onnxruntime: ${runs.length} runs, ${runSeconds.toFixed(3)} s in runs, ${total.toFixed(3)} s in kernels`);
  for (const [op, s] of [...byOp.entries()].sort((a, b) => b[1] - a[1]).slice(0, 14))
    console.log(`  ${op.padEnd(28)} ${s.toFixed(3)} s  ${((100 * s) / total).toFixed(1)}%`);
  console.log('nodes:');
  for (const [node, s] of [...byNode.entries()].sort((a, b) => b[1] - a[1]).slice(0, 24))
    console.log(`  ${node.padEnd(60)} ${s.toFixed(3)} s`);
  fs.rmSync(path.dirname(prefix), { recursive: true, force: true });
}
