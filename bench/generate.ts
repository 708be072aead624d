// Generation on the 56M bench model (CPU, F32, 2 threads, greedy): batch-1 decode speed,
// the aggregate of 16 concurrent streams, the step time with a long past against a short
// one (and the KV the session thread copies per step), the first token of a 1900-token
// prompt while 8 streams decode (and their step latency meanwhile), and the bytes that
// cross session.run per generated token — each decode step a unit of the one scheduler,
// its KV carried from step to step by the prefix cache. With BENCH_PEER=on (node-llama-cpp
// installed by bench/peer.ts into .bench/peer/), llama.cpp's batch-1 greedy decode on the
// same weights, F32 KV, and its step with the same long and short pasts.
// Prints figures, asserts nothing.
//   npx tsx bench/generate.ts          BENCH_TOKENS=64 BENCH_STREAMS=16
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Engine } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { Batcher } from '../src/core/batcher.js';
import { Generation, generationModel, runGenerations, type GenerationModel } from '../src/requests/generate.js';
import type { SamplingParams } from '../src/requests/sampling.js';
import { benchModelDir, randomIds } from './model.js';

const THREADS = Number(process.env.BENCH_THREADS ?? 2);
const TOKENS = Number(process.env.BENCH_TOKENS ?? 64);
const STREAMS = Number(process.env.BENCH_STREAMS ?? 16);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

const dir = benchModelDir();
const engine = await Engine.load(dir, { threads: THREADS });
/** A model served: its engine, its generation model, its queue. */
interface Served {
  engine: Engine;
  model: GenerationModel;
  batcher: Batcher;
}
const serve = (e: Engine): Served => {
  const s = new Scorer(e);
  return { engine: e, model: generationModel(e, s), batcher: new Batcher('bench', s) };
};
const main = serve(engine);
const { model, batcher } = main;
const params = (maxTokens: number): SamplingParams => ({ temperature: 0, topP: 1, topK: 0, minP: 0, maxTokens, stop: [], n: 1, logprobs: 0, ignoreEos: true });

/** Generate from `prompts` together; seconds from the first step to the last. */
async function decode(prompts: number[][], maxTokens: number, on: Served = main): Promise<{ seconds: number; tokens: number; firstTokenSeconds: number; stepSeconds: number[] }> {
  const t0 = performance.now();
  let first = 0;
  const steps: number[] = [];
  let last = t0;
  const results = await runGenerations(
    prompts.map((p) => new Generation(on.model, p, params(maxTokens))),
    (units, continuing) => on.batcher.submit(units, { continuing }).result,
    () => {
      const now = performance.now();
      if (!first) first = now;
      steps.push(now - last);
      last = now;
    },
  );
  const seconds = (performance.now() - t0) / 1000;
  return { seconds, tokens: results.flat().reduce((n, r) => n + r.tokens.length, 0), firstTokenSeconds: (first - t0) / 1000, stepSeconds: steps.slice(1).map((s) => s / 1000) };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

console.log(`generation — 56M bench model, ${THREADS} threads, F32, greedy, ${TOKENS} tokens per stream`);
await decode([randomIds(1, 32)], 8); // warm-up
const one = await decode([randomIds(2, 32)], TOKENS);
// Each stream's step resolves when its round does: one decode step is one round.
const oneRate = (TOKENS - 1) / (one.seconds - one.firstTokenSeconds);
console.log(`batch 1: ${oneRate.toFixed(1)} tokens/s (median step ${(median(one.stepSeconds) * 1000).toFixed(1)} ms; first token ${(one.firstTokenSeconds * 1000).toFixed(0)} ms)`);
const streams = async (label: string, prompts: number[][]) => {
  const r = await decode(prompts, TOKENS);
  const rate = r.tokens / r.seconds;
  console.log(`${STREAMS} streams${label}: ${rate.toFixed(1)} tokens/s aggregate = ${(rate / oneRate).toFixed(2)}x batch 1`);
};
await streams('', Array.from({ length: STREAMS }, (_, k) => randomIds(100 + k, 32)));
// As clients send them: prompts of different lengths.
await streams(', prompts of 17–47 tokens', Array.from({ length: STREAMS }, (_, k) => randomIds(200 + k, 17 + ((k * 7) % 31))));
// A step's time with a long past against a short one, and the KV the session thread copies
// per step (the prompt already cached: its prefill is not counted). On the bench model with
// a 32k context (positions only differ), for a 4k past.
const PASTS = [256, 1900, 4000];
const stepByPast = new Map<number, number>();
{
  const long = serve(await Engine.load(benchModelDir({ maxPositions: 32768 }, 'ctxprobe-bench-llama-56m-32k'), { threads: THREADS }));
  for (const past of PASTS) {
    const prompt = randomIds(300 + past, past);
    const prefill = await decode([prompt], 1, long);
    const before = await long.engine.laidOutKvBytes();
    const r = await decode([prompt], 17, long);
    const copied = ((await long.engine.laidOutKvBytes()) - before) / (r.tokens - 1) / long.engine.kvBytesPerToken;
    stepByPast.set(past, median(r.stepSeconds));
    console.log(
      `past ${past}: median step ${(median(r.stepSeconds) * 1000).toFixed(1)} ms, KV copied ${copied.toFixed(0)} positions a step (prompt in ${prefill.firstTokenSeconds.toFixed(2)} s)`,
    );
  }
  await long.engine.release();
}
const stepRatios = (steps: Map<number, number>) => PASTS.slice(1).map((p) => `at ${p} ${(steps.get(p)! / steps.get(256)!).toFixed(2)}x`).join(', ');
console.log(`step ÷ step at 256: ${stepRatios(stepByPast)}`);

// A long prompt arriving while 8 streams decode: it is prefilled in chunks of one pass
// (maxBatchTokens), each round also stepping the streams.
{
  const gaps: number[] = [];
  let last = 0;
  let during = false;
  const streams = runGenerations(
    Array.from({ length: 8 }, (_, k) => new Generation(model, randomIds(500 + k, 32), params(48))),
    (units, continuing) => batcher.submit(units, { continuing }).result,
    (g) => {
      if (g !== 0) return; // one stream's steps (all eight step together)
      const now = performance.now();
      if (during && last) gaps.push(now - last);
      last = now;
    },
  );
  await new Promise((r) => setTimeout(r, 150));
  during = true;
  const t = performance.now();
  await runGenerations([new Generation(model, randomIds(999, 1900), params(1))], (units, continuing) => batcher.submit(units, { continuing }).result);
  const ttft = (performance.now() - t) / 1000;
  during = false;
  await streams;
  const alone = await decode([randomIds(998, 1900)], 1);
  console.log(
    `1900-token prompt while 8 streams decode: first token in ${ttft.toFixed(2)} s (alone ${alone.seconds.toFixed(2)} s); ` +
      `the streams' steps meanwhile: median ${median(gaps).toFixed(0)} ms, longest ${Math.max(...gaps).toFixed(0)} ms`,
  );
}

// What crosses session.run per generated token, batch 1, a 256-token past.
{
  const totals = { inputs: 0, pastKv: 0, outputs: 0, presentKv: 0, passes: 0 };
  let counting = false;
  engine.onPass((p) => {
    if (!counting) return;
    totals.passes++;
    for (const k of ['inputs', 'pastKv', 'outputs', 'presentKv'] as const) totals[k] += p.bytes[k];
  });
  const prompt = randomIds(77, 256);
  await decode([prompt], 1); // the prompt into the cache
  counting = true;
  const r = await decode([prompt], 33);
  counting = false;
  const per = (n: number) => `${(n / (r.tokens - 1) / 1024).toFixed(0)} KiB`;
  console.log(
    `per generated token (256-token past): inputs ${per(totals.inputs)} + past KV ${per(totals.pastKv)} read in place; ` +
      `outputs ${per(totals.outputs)} + present KV ${per(totals.presentKv)} (${totals.passes} passes)`,
  );
}
await engine.release();

if (process.env.BENCH_PEER === 'on') {
  const entry = path.join(ROOT, '.bench/peer/node_modules/node-llama-cpp/dist/index.js');
  const gguf = path.join(ROOT, '.bench/peer/bench-56m-f32.gguf');
  if (!fs.existsSync(entry) || !fs.existsSync(gguf)) {
    console.log('llama.cpp: run bench/peer.ts once first (it installs node-llama-cpp and writes the GGUF)');
  } else {
    const { getLlama } = await import(pathToFileURL(entry).href);
    const llama = await getLlama({ gpu: false, logLevel: 'error' });
    const m = await llama.loadModel({ modelPath: gguf });
    const context = await m.createContext({ contextSize: 2048, batchSize: 512, threads: THREADS, experimentalKvCacheKeyType: 'F32', experimentalKvCacheValueType: 'F32', flashAttention: false });
    const seq = context.getSequence();
    const run = async (prompt: number[], n: number) => {
      await seq.clearHistory();
      let count = 0;
      let start = 0;
      for await (const _ of seq.evaluate(prompt as never, { temperature: 0 })) {
        if (count === 0) start = performance.now();
        if (++count >= n) break;
      }
      return (n - 1) / ((performance.now() - start) / 1000);
    };
    await run(randomIds(1, 32), 8);
    const peer = await run(randomIds(2, 32), TOKENS);
    console.log(`llama.cpp batch 1: ${peer.toFixed(1)} tokens/s → ctxprobe ${(oneRate / peer).toFixed(2)}x`);
    // Its step with the same long and short pasts (a context past the GGUF's 2048 positions:
    // they change its values, not its work).
    const longContext = await m.createContext({ contextSize: 4096 + 64, batchSize: 512, threads: THREADS, experimentalKvCacheKeyType: 'F32', experimentalKvCacheValueType: 'F32', flashAttention: false });
    const longSeq = longContext.getSequence();
    const peerStep = new Map<number, number>();
    for (const past of PASTS) {
      await longSeq.clearHistory();
      let count = 0;
      let start = 0;
      for await (const _ of longSeq.evaluate(randomIds(300 + past, past) as never, { temperature: 0 })) {
        if (count === 0) start = performance.now();
        if (++count >= 17) break;
      }
      peerStep.set(past, (performance.now() - start) / 1000 / 16);
      console.log(
        `llama.cpp past ${past}: mean step ${(peerStep.get(past)! * 1000).toFixed(1)} ms → ctxprobe's median ÷ it ${(stepByPast.get(past)! / peerStep.get(past)!).toFixed(2)}x`,
      );
    }
    console.log(`llama.cpp step ÷ step at 256: ${stepRatios(peerStep)}`);
    await longContext.dispose();
    await context.dispose();
    await m.dispose();

    // Greedy text of a trained model (../shared's stories260K, the GGUF llama.cpp reads and
    // the checkpoint ctxprobe reads) from the same prompt ids, on both sides.
    const shared = path.join(ROOT, '../shared/models');
    if (fs.existsSync(path.join(shared, 'stories260K.gguf'))) {
      const ours = await Engine.load(path.join(shared, 'stories260K'), { threads: THREADS });
      const oursScorer = new Scorer(ours);
      const oursBatcher = new Batcher('stories', oursScorer);
      const prompt = ours.tokenizer.encode('Once upon a time, there was a little girl named Lily.', true);
      const mine = (
        await runGenerations(
          [new Generation(generationModel(ours, oursScorer), prompt, { ...params(96), ignoreEos: false })],
          (units, continuing) => oursBatcher.submit(units, { continuing }).result,
        )
      )[0]![0];
      await ours.release();
      const sm = await llama.loadModel({ modelPath: path.join(shared, 'stories260K.gguf') });
      const sc = await sm.createContext({ contextSize: 512, threads: THREADS, experimentalKvCacheKeyType: 'F32', experimentalKvCacheValueType: 'F32', flashAttention: false });
      const theirs: number[] = [];
      for await (const t of sc.getSequence().evaluate(prompt as never, { temperature: 0 })) {
        theirs.push(Number(t));
        if (theirs.length >= mine!.tokens.length) break;
      }
      const same = theirs.findIndex((t, k) => t !== mine!.tokens[k]);
      console.log(
        `stories260K greedy, ${mine!.tokens.length} tokens: ${same < 0 ? 'identical to llama.cpp' : `first difference at token ${same} (ctxprobe ${mine!.tokens[same]}, llama.cpp ${theirs[same]})`}`,
      );
      await sc.dispose();
      await sm.dispose();
    }
  }
}
