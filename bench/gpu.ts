// The GPU workloads of ../shared/gpu/README.md's table, for any device, one JSON line each
// (prints figures, asserts nothing): scoring 1×512, 16×512 and 32×1024 (the notes' 8×1024
// four at once) in tokens/s; probes of 4k, 8k, 16k and 32k tokens in 12 rounds (seconds); generation of
// 1 and 16 streams (tokens/s) with the bytes that cross session.run per decode step; and
// the bit contracts on this device (counts of values that differ, 0 the contract). On a
// synthetic checkpoint of the 360M shape of those notes (hidden 960, 32 layers, 15/5 heads,
// vocabulary 49152), which transformers loads as it is: bench/gpu_peer.py runs the same
// workloads in PyTorch on it (bench/gpu-host.sh runs both on a GPU host).
// With --dtype float16 on WebGPU (products accumulate in float16) it also prints the
// log-prob error against float32 on the same tokens, beside its speed.
//
//   node bench/gpu.js [--device webgpu|cpu|cuda] [--dtype float32|float16] [--shape 360m|tiny]
//                     [--only score,probe,generate,contracts,profile] [--probe-lengths 4096,8192] [--dir DIR]
// `profile` (not in the default set) loads the model again with onnxruntime's profiler on,
// runs passes scoring 512 tokens, decode steps of 1 and of 16 streams and an 8k probe, and
// prints where a pass's time goes: each op type's time per run, from the profile's node
// events (on WebGPU a node's time is what the host spends on it: dispatch, and any wait for
// the device), and on WebGPU the device's own per op type and per node (layers together).
// KEEP_PROFILE=1 keeps the profile files (their folder is printed) for a closer look.
// (bench/gpu.js runs the compiled dist/bench/gpu.js: `npm run build` first; from a checkout,
// `npx tsx bench/gpu.ts` does the same.)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Engine, type PassRecord } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { Batcher } from '../src/core/batcher.js';
import { Prober } from '../src/requests/probe.js';
import { Generation, generationModel, runGenerations } from '../src/requests/generate.js';
import type { SamplingParams } from '../src/requests/sampling.js';
import { writeSyntheticCheckpoint, type SyntheticSpec } from '../src/model/synthetic.js';
import type { ComputeDType } from '../src/common/dtypes.js';
import type { DeviceOptions } from '../src/engine/device.js';
import { randomIds } from './model.js';
import { directScoring } from '../src/requests/scoring.js';

const { values: args } = parseArgs({
  options: {
    device: { type: 'string', default: process.env.BENCH_DEVICE ?? 'webgpu' },
    dtype: { type: 'string' },
    shape: { type: 'string', default: '360m' },
    only: { type: 'string', default: 'score,probe,generate,contracts' },
    'probe-lengths': { type: 'string', default: '4096,8192,16384,32768' },
    dir: { type: 'string' },
    threads: { type: 'string', default: '0' },
    // Trials of what a pass's size costs on a device: scoring's padded tokens per pass, and
    // bytes of one layer's attention scores (the Scorer's maxBatchTokens, maxAttentionBytes).
    'batch-tokens': { type: 'string' },
    'attention-mib': { type: 'string' },
    // onnxruntime's WebGPU storage buffer cache (DeviceOptions.bufferCache).
    'buffer-cache': { type: 'string' },
    // onnxruntime's WebGPU validationMode (DeviceOptions.gpuValidation).
    validation: { type: 'string' },
  },
});

/** The 360M Llama shape of ../shared/gpu/README.md (SmolLM2-360M's), and a tiny one for
 * trying the script on a software GPU. */
const SHAPES: Record<string, SyntheticSpec> = {
  '360m': {
    family: 'llama',
    hidden: 960,
    layers: 32,
    heads: 15,
    kvHeads: 5,
    intermediate: 2560,
    vocab: 300,
    vocabSize: 49152,
    maxPositions: 32768,
    seed: 3,
    scale: 0.05,
    tied: true,
  },
  tiny: {
    family: 'llama',
    hidden: 64,
    layers: 2,
    heads: 4,
    kvHeads: 2,
    intermediate: 128,
    vocab: 300,
    vocabSize: 1024,
    maxPositions: 32768,
    seed: 3,
    scale: 0.1,
  },
};
const shape = SHAPES[args.shape!];
if (!shape) throw new Error(`--shape ${args.shape}: one of ${Object.keys(SHAPES).join(', ')}`);
const dir = args.dir ?? path.join(os.tmpdir(), `ctxprobe-gpu-bench-${args.shape}`);
if (!fs.existsSync(path.join(dir, 'model.safetensors'))) writeSyntheticCheckpoint(dir, shape);

const only = new Set(args.only!.split(','));
const dtype = args.dtype as ComputeDType | undefined;
const threads = Number(args.threads);
const bufferCache = args['buffer-cache'] as DeviceOptions['bufferCache'];
const gpuValidation = args.validation as DeviceOptions['gpuValidation'];
const providerOptions = { ...(bufferCache ? { bufferCache } : {}), ...(gpuValidation ? { gpuValidation } : {}) };
const engine = await Engine.load(dir, { device: args.device, ...(dtype ? { dtype } : {}), threads, ...providerOptions });
const passSize = {
  ...(args['batch-tokens'] ? { maxBatchTokens: Number(args['batch-tokens']) } : {}),
  ...(args['attention-mib'] ? { maxAttentionBytes: Number(args['attention-mib']) * 2 ** 20 } : {}),
};
const vocab = engine.config.vocabSize;
const base = { device: engine.info.device, dtype: engine.info.dtype, shape: args.shape, ...passSize, ...providerOptions };
const line = (workload: string, figures: Record<string, unknown>) => console.log(JSON.stringify({ workload, ...base, ...figures }));
line('load', {
  adapter: engine.info.adapter,
  seconds: +engine.info.sessionSeconds.toFixed(2),
  cpuNodes: engine.info.cpuNodes,
  floatNodesOnCpu: engine.info.floatNodesOnCpu,
});

const passes: PassRecord[] = [];
/** When each pass ended (ms): the gaps between passes are the host's time. */
const endedAt = new WeakMap<PassRecord, number>();
engine.onPass((p) => {
  passes.push(p);
  endedAt.set(p, performance.now());
});
/** The passes since `passes` was last emptied, per run of `runs`: how many, and the seconds
 * spent in session runs (the rest of a run's time is the host's). */
const inPasses = (runs = 1) => ({
  passes: passes.length / runs,
  runSeconds: +(passes.reduce((n, p) => n + p.seconds, 0) / runs).toFixed(3),
});
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
/** Seconds of `fn`, median of `runs` after one warm-up run (none when `warm` is false). */
async function timed(fn: () => Promise<unknown>, runs = 3, warm = true): Promise<number> {
  if (warm) await fn();
  const out: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    await fn();
    out.push((performance.now() - t) / 1000);
  }
  return median(out);
}

// ---- scoring: every token of each sequence (rolling log-likelihood), no prefix cache -----
if (only.has('score')) {
  const scorer = new Scorer(engine, { prefixCacheBytes: 0, ...passSize });
  const texts = (n: number, len: number, seed: number) => Array.from({ length: n }, (_, i) => ({ text: randomIds(seed + i, len, vocab) }));
  // The notes' "8×1024, 4 at once" is 32 sequences of 1024 in one scheduler's passes.
  for (const [name, n, len] of [
    ['score_1x512', 1, 512],
    ['score_16x512', 16, 512],
    ['score_32x1024', 32, 1024],
  ] as const) {
    const items = texts(n, len, len);
    passes.length = 0;
    const seconds = await timed(() => directScoring(scorer).rolling(items));
    const tokens = n * len;
    line(name, {
      tokens,
      seconds: +seconds.toFixed(3),
      tokensPerSecond: Math.round(tokens / seconds),
      ...inPasses(4), // the warm-up and three timed runs
    });
  }
  // The price of float16 products (log-probs against float32 on the same device), or, in
  // float32 on a GPU, the agreement with the CPU provider, on the same 512 tokens.
  const reference =
    engine.info.dtype === 'float16'
      ? { name: 'float16_error', device: args.device! }
      : engine.info.device !== 'cpu'
        ? { name: 'cpu_agreement', device: 'cpu' }
        : undefined;
  if (reference) {
    const other = await Engine.load(dir, { device: reference.device, dtype: 'float32', threads });
    const ids = randomIds(512, 512, vocab);
    const [a, b] = await Promise.all(
      [new Scorer(engine, { prefixCacheBytes: 0 }), new Scorer(other, { prefixCacheBytes: 0 })].map((s) => directScoring(s).rolling([{ text: ids }])),
    );
    const d = a![0]!.tokenLogprobs.map((v, i) => Math.abs(v - b![0]!.tokenLogprobs[i]!));
    line(reference.name, {
      against: `${other.info.device} ${other.info.dtype}`,
      tokens: d.length,
      maxAbs: Math.max(...d),
      meanAbs: d.reduce((x, y) => x + y, 0) / d.length,
    });
    await other.release();
  }
}

// ---- probes: a dialogue of 12 rounds, chunk statistics and a heatmap --------------------
/** A dialogue of `T` tokens in 12 rounds, as a probe sample. */
const dialogue = (T: number) => {
  const ids = randomIds(T, T, vocab);
  const per = Math.floor(T / 12);
  const chunkIds = Array.from({ length: 12 }, (_, r) => ({
    label: r === 0 ? 'system' : `${r % 2 ? 'user' : 'assistant'}#${Math.ceil(r / 2)}`,
    ids: ids.slice(r * per, r === 11 ? T : (r + 1) * per),
  }));
  return [{ chunkIds, excludePositions: [0] }];
};
if (only.has('probe')) {
  const prober = new Prober(engine);
  // One warm-up on a 1k dialogue (kernels compiled, buffers pooled), then each length once:
  // a warm-up at 32k would double the longest run, and a lent GPU host gives minutes.
  await prober.probe(dialogue(1024));
  for (const T of args['probe-lengths']!.split(',').map(Number)) {
    if (T > engine.config.maxPositions) continue;
    try {
      passes.length = 0;
      const seconds = await timed(() => prober.probe(dialogue(T)), 1, false);
      line(`probe_${T}`, { tokens: T, rounds: 12, seconds: +seconds.toFixed(2), ...inPasses() });
    } catch (e) {
      line(`probe_${T}`, { tokens: T, error: (e as Error).message.slice(0, 300) });
    }
  }
}

// ---- generation: greedy decode, each step a unit of the one scheduler --------------------
/** Greedy generations of `maxTokens` from `prompts` on `on`, through a scheduler of its own. */
function generate(on: Engine, scorer: Scorer, prompts: number[][], maxTokens: number) {
  const params: SamplingParams = { temperature: 0, topP: 1, topK: 0, minP: 0, maxTokens, stop: [], n: 1, logprobs: 0, ignoreEos: true };
  const batcher = new Batcher('bench', scorer);
  return runGenerations(
    prompts.map((p) => new Generation(generationModel(on, scorer), p, params)),
    (units, continuing) => batcher.submit(units, { continuing }).result,
  );
}
if (only.has('generate')) {
  for (const streams of [1, 16]) {
    const scorer = new Scorer(engine);
    const prompts = (seed: number) => Array.from({ length: streams }, (_, i) => randomIds(seed + i, 128, vocab));
    const run = async (seed: number) => {
      passes.length = 0;
      const t = performance.now();
      const results = await generate(engine, scorer, prompts(seed), 64);
      return { seconds: (performance.now() - t) / 1000, tokens: results.flat().reduce((n, r) => n + r.tokens.length, 0) };
    };
    // A warm-up (kernels compiled, buffers cached), then new prompts: the same ones again
    // would find their generations in the prefix cache.
    await run(5000);
    const { seconds, tokens } = await run(6000);
    // Decode steps: the passes after each prompt's own (one token a row).
    const decode = passes.flatMap((p, i) => (p.tokens <= p.rows * 4 ? [i] : []));
    const steps = decode.map((i) => passes[i]!);
    const per = (k: keyof PassRecord['bytes']) => Math.round(steps.reduce((n, p) => n + p.bytes[k], 0) / Math.max(1, steps.length));
    // Where a step's time goes: its session run, and the rest between one pass's end and the
    // next (the scheduler, the sampler, laying out the past), in ms, step by step: a cost
    // that comes every few steps (a new shape) shows as a period.
    const ms = (s: number) => +(s * 1000).toFixed(1);
    const stepMs = decode.slice(1).map((i) => ({ run: ms(passes[i]!.seconds), between: ms((endedAt.get(passes[i]!)! - endedAt.get(passes[i - 1]!)!) / 1000 - passes[i]!.seconds) }));
    line(`generate_${streams}`, {
      streams,
      tokens,
      seconds: +seconds.toFixed(2),
      tokensPerSecond: +(tokens / seconds).toFixed(1),
      decodeSteps: steps.length,
      ...inPasses(),
      bytesPerStep: { inputs: per('inputs'), pastKv: per('pastKv'), outputs: per('outputs'), presentKv: per('presentKv') },
      stepMs: {
        runMedian: median(stepMs.map((s) => s.run)),
        betweenMedian: median(stepMs.map((s) => s.between)),
        run: stepMs.slice(0, 32).map((s) => s.run),
        between: stepMs.slice(0, 32).map((s) => s.between),
      },
    });
  }
}
// ---- contracts on this device: the tests check them on lavapipe; a GPU's driver may pick
// other kernels. Counts of values that differ (0 is the contract), not times.
if (only.has('contracts')) {
  // Batched = alone: one-token continuations (the final norm and log-softmax of a pass
  // that scores one token see one row), the token's log-prob and its position's top 8.
  const scoring = directScoring(new Scorer(engine, { prefixSharing: false, prefixCacheBytes: 0 }));
  const requests = Array.from({ length: 16 }, (_, i) => {
    const seq = randomIds(7000 + i, 16 + 5 * i, vocab);
    return { context: seq.slice(0, -1), continuations: [seq.slice(-1)], topK: 8 };
  });
  const values = (a: Awaited<ReturnType<typeof scoring.loglikelihood>>[number]) => [a[0]!.tokenLogprobs[0]!, ...a[0]!.topK![0]!.logprobs];
  const batched = (await scoring.loglikelihood(requests)).map(values);
  let batchedDiffer = 0;
  for (const [i, request] of requests.entries()) {
    const alone = values((await scoring.loglikelihood([request]))[0]!);
    batchedDiffer += alone.filter((v, j) => v !== batched[i]![j]).length;
  }
  // A generated token's log-prob is the bits Score gives it; 4 streams together = each alone.
  const prompts = Array.from({ length: 4 }, (_, i) => randomIds(8000 + i, 20 + 9 * i, vocab));
  const together = await generate(engine, new Scorer(engine), prompts, 8);
  let scoreDiffer = 0;
  let aloneDiffer = 0;
  let tokens = 0;
  for (const [i, [choice]] of together.entries()) {
    const seq = prompts[i]!.concat(choice!.tokens);
    for (const [k, token] of choice!.tokens.entries()) {
      const [score] = await scoring.loglikelihood([{ context: seq.slice(0, prompts[i]!.length + k), continuations: [[token]] }]);
      if (score![0]!.tokenLogprobs[0] !== choice!.logprobs[k]) scoreDiffer++;
      tokens++;
    }
    const [alone] = (await generate(engine, new Scorer(engine), [prompts[i]!], 8))[0]!;
    aloneDiffer += alone!.logprobs.filter((v, k) => v !== choice!.logprobs[k]).length + (alone!.tokens.join() === choice!.tokens.join() ? 0 : 1);
  }
  line('contracts', {
    batchedEqualsAlone: { differ: batchedDiffer, of: batched.flat().length },
    generatedEqualsScore: { differ: scoreDiffer, of: tokens },
    togetherEqualsAlone: { differ: aloneDiffer, of: tokens },
  });
}
// ---- profile: onnxruntime's own account of a scoring pass and a decode step -------------
if (only.has('profile')) {
  const prefix = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'ctxprobe-profile-')), 'run');
  const profiled = await Engine.load(dir, { device: args.device, ...(dtype ? { dtype } : {}), threads, profilePrefix: prefix });
  const scorer = new Scorer(profiled, { prefixCacheBytes: 0 });
  // The model session's runs, phase by phase: where each phase's runs start and end.
  let modelRuns = 0;
  profiled.onPass((p) => void (p.kind === 'score' && modelRuns++));
  const phase = async (work: () => Promise<unknown>) => {
    const first = modelRuns;
    await work();
    return { first, end: modelRuns };
  };
  // 8 texts of 512 tokens, a pass each: a warm-up call, then the passes of a second.
  const texts = Array.from({ length: 8 }, (_, i) => ({ text: randomIds(7 + i, 512, vocab) }));
  await directScoring(scorer).rolling(texts);
  const scoring = await phase(() => directScoring(scorer).rolling(texts));
  // Decode steps of one stream and of 16 (a prompt of 128, then 32 tokens): the last 24.
  const decode1 = await phase(() => generate(profiled, new Scorer(profiled), [randomIds(11, 128, vocab)], 32));
  const decode16 = await phase(() =>
    generate(
      profiled,
      new Scorer(profiled),
      Array.from({ length: 16 }, (_, i) => randomIds(40 + i, 128, vocab)),
      32,
    ),
  );
  // A probe of 8k tokens in 12 rounds (its own session, its own profile): its passes.
  await new Prober(profiled).probe(dialogue(8192));
  await profiled.release();
  const files = fs.readdirSync(path.dirname(prefix)).map((f) => path.join(path.dirname(prefix), f));
  type Event = { cat: string; name: string; ts: number; dur: number; args?: { op_name?: string; provider?: string } };
  // The model's session is the profile whose nodes are the model's; the KV layout sessions
  // (their nodes under /layout/) write their own, summed below as what a step spends there.
  const profiles = files.map((f) => JSON.parse(fs.readFileSync(f, 'utf8')) as Event[]);
  const runsOf = (events: Event[]) => events.filter((e) => e.cat === 'Session' && e.name === 'model_run');
  const isModel = (events: Event[]) => events.some((e) => e.cat === 'Node' && e.name.startsWith('/model/'));
  // The probe session's graph has the tap (its nodes under /probe/ or /tap/).
  const isProbe = (events: Event[]) => events.some((e) => e.cat === 'Node' && /\/(probe|tap)\//.test(e.name));
  const layoutRuns = profiles.filter((p) => !isModel(p)).flatMap(runsOf);
  /** Events of `runs` runs by `keyOf`, per run: milliseconds and count, the top 15 and the sums. */
  const byOp = (events: Event[], runs: number, keyOf: (e: Event) => string) => {
    const ops = new Map<string, { ms: number; count: number }>();
    for (const e of events) {
      const a = ops.get(keyOf(e)) ?? { ms: 0, count: 0 };
      a.ms += e.dur / 1000 / runs;
      a.count += 1 / runs;
      ops.set(keyOf(e), a);
    }
    const top = [...ops.entries()].sort((x, y) => y[1].ms - x[1].ms).slice(0, 15);
    return {
      ms: [...ops.values()].reduce((n, a) => n + a.ms, 0),
      count: [...ops.values()].reduce((n, a) => n + a.count, 0),
      top: Object.fromEntries(top.map(([k, a]) => [k, { ms: +a.ms.toFixed(2), count: +a.count.toFixed(1) }])),
    };
  };
  /** One session's profile, runs [first, end) of it: the host's time per op type (node
   * events), and the device's (on WebGPU, timestamp queries: 'Api' events, one a program
   * run, written after the run's nodes) per op type and per node, layers taken together. */
  const account = (name: string, events: Event[], first: number, end: number) => {
    const runs = runsOf(events);
    const window = runs.slice(first, end);
    const nodes = events.filter((e) => e.cat === 'Node' && e.name.endsWith('_kernel_time'));
    const inWindow = nodes.filter((n) => window.some((r) => n.ts >= r.ts && n.ts <= r.ts + r.dur));
    const host = byOp(inWindow, window.length, (n) => `${n.args?.op_name}@${n.args?.provider === 'CPUExecutionProvider' ? 'cpu' : 'gpu'}`);
    // The device's programs come in run order, each run's starting at every pass's first
    // program: the split of its index feeds (index-feeds.ts), or in a graph without them
    // the token embedding.
    const programs = events.filter((e) => e.cat === 'Api');
    const start = programs.some((e) => e.name.startsWith('/model/index_feeds/split')) ? '/model/index_feeds/split' : '/model/embed_tokens';
    const perRun: Event[][] = [];
    for (const e of programs) {
      if (e.name.startsWith(start) || perRun.length === 0) perRun.push([]);
      perRun.at(-1)!.push(e);
    }
    const device = (() => {
      if (perRun.length !== runs.length) return {};
      const mine = perRun.slice(first, end);
      const byType = byOp(mine.flat(), mine.length, (e) => e.name.split('&')[1] ?? e.name);
      const byNode = byOp(mine.flat(), mine.length, (e) => e.name.split('&')[0]!.replace(/layers\.\d+\//, 'layers.*/'));
      // Programs the device ran a run: the dispatches the host paid for (aliases such as
      // Reshape are nodes with none).
      return {
        deviceMsPerRun: +byType.ms.toFixed(2),
        dispatchesPerRun: Math.round(byType.count),
        topDeviceOpsMsPerRun: byType.top,
        topDeviceNodesMsPerRun: byNode.top,
      };
    })();
    line(name, {
      runs: window.length,
      msPerRun: +(window.reduce((n, r) => n + r.dur, 0) / 1000 / Math.max(1, window.length)).toFixed(2),
      nodesPerRun: Math.round(host.count),
      topOpsMsPerRun: host.top,
      ...device,
    });
  };
  // On WebGPU probes run a session of their own (its profile apart); on the CPU one session
  // runs both, its probe passes after the rest.
  const models = profiles.filter(isModel);
  const model = models.find((p) => !isProbe(p)) ?? models[0] ?? [];
  const probeOwn = models.length > 1 ? models.find(isProbe) : undefined;
  account('profile_score_512', model, scoring.first, scoring.end);
  account('profile_decode_step', model, decode1.end - 24, decode1.end);
  account('profile_decode_step_16', model, decode16.end - 24, decode16.end);
  // The probe's passes after its first (12 rounds of 8k: the later ones see the most keys).
  const probe = probeOwn ?? model;
  const probeRuns = runsOf(probe).length;
  account('profile_probe_8192', probe, Math.max(probeOwn ? 1 : decode16.end + 1, probeRuns - 6), probeRuns);
  // KV layouts (a past gathered from kept pieces, a new token's cache segment): separate
  // session runs, between and inside the passes.
  line('profile_layouts', {
    runs: layoutRuns.length,
    msPerRun: +(layoutRuns.reduce((n, r) => n + r.dur, 0) / 1000 / Math.max(1, layoutRuns.length)).toFixed(2),
  });
  if (!process.env.KEEP_PROFILE) fs.rmSync(path.dirname(prefix), { recursive: true, force: true });
  else line('profile_files', { dir: path.dirname(prefix) });
}
await engine.release();
