// --device webgpu on a software GPU (Mesa's lavapipe under Dawn, ../shared/gpu/README.md):
// the graphs built for WebGPU leave no float node to the CPU provider (onnxruntime's own
// placement log, every family); log-probs and attention statistics equal the CPU
// provider's to float32 rounding; the contracts hold on the device (a generated token's
// log-prob is the bits Score gives it there, cached = uncached, batched = alone); and the
// KV stays on the device: a decode step moves token ids in and a few floats out.
//
// Skips, saying so, where no Vulkan driver is installed (.ci/run installs lavapipe).
import fs from 'node:fs';
import path from 'node:path';
import ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine, type ForwardRequest, type PastKV } from '../src/engine/engine.js';
import { Scorer } from '../src/core/scorer.js';
import { Batcher } from '../src/core/batcher.js';
import { Generation, generationModel, runGenerations } from '../src/requests/generate.js';
import type { SamplingParams } from '../src/requests/sampling.js';
import { resolveDevice } from '../src/engine/device.js';
import { placements } from '../src/engine/placements.js';
import { buildKvLayoutGraph } from '../src/engine/kv-layout.js';
import { buildDecoderGraph } from '../src/model/decoder.js';
import { GraphBuilder, type NormRows } from '../src/graph/builder.js';
import { readModelConfig } from '../src/model/config.js';
import { SafetensorsCheckpoint } from '../src/checkpoint/safetensors.js';
import { probeTap } from '../kernels/probe-tap.js';
import { logprobKernel } from '../kernels/logprobs.js';
import { firstMax } from '../kernels/attention.js';
import { rng } from '../src/common/random.js';
import { maxOf } from '../src/common/sequences.js';
import { loadModel } from '../src/serving/repository.js';
import { CtxprobeServer } from '../src/server.js';
import { FAMILY_FIXTURES, makeFixture, tempDir, type Fixture } from './fixtures.js';
import { rowsThatDiffer, type RowForm } from './row-bits.js';
import { postJson, scrape, VULKAN_DRIVERS } from './helpers.js';
import { serveCli } from './cli-serve.js';
import { directScoring } from '../src/requests/scoring.js';

const maybe = VULKAN_DRIVERS ? describe : describe.skip;
if (!VULKAN_DRIVERS)
  console.warn('webgpu tests skipped: no Vulkan driver (apt-get install libvulkan1 and, from bookworm-backports, mesa-vulkan-drivers)');

const GREEDY: SamplingParams = { temperature: 0, topP: 1, topK: 0, minP: 0, maxTokens: 6, stop: [], n: 1, logprobs: 2 };
const randomTokens = (r: () => number, n: number, vocab: number) => Array.from({ length: n }, () => 3 + Math.floor(r() * (vocab - 3)));

/** `n` random sequences of `first`, `first + step`, … tokens, each a 5-token context and
 * the rest as its continuation. */
const continuations = (r: () => number, n: number, first: number, step: number, vocab: number) =>
  Array.from({ length: n }, (_, i) => {
    const seq = randomTokens(r, first + step * i, vocab);
    return { context: seq.slice(0, 5), continuations: [seq.slice(5)] };
  });

/** The graph as `Engine.load` builds it for `device`, and the options it creates it with. */
function graphFor(fx: Fixture, target: 'cpu' | 'webgpu', dtype: 'float32' | 'float16' = 'float32', tap = true) {
  const config = readModelConfig(fx.dir);
  const graph = buildDecoderGraph(config, new SafetensorsCheckpoint(fx.dir), dtype, tap ? probeTap() : undefined, target);
  const device = resolveDevice({ device: 'webgpu', threads: 1 });
  return {
    model: graph.model,
    options: { ...device.sessionOptions, extra: { session: { model_external_initializers_file_folder_path: fx.dir } } },
  };
}

maybe('WebGPU placements (onnxruntime verbose log, software GPU)', () => {
  it('catches what it is for: the CPU graph on WebGPU leaves its products and log-softmax to the CPU', async () => {
    const fx = makeFixture(FAMILY_FIXTURES.llama!);
    const { model, options } = graphFor(fx, 'cpu');
    const placed = await placements(model, options);
    const floatOps = new Set(placed.floatOnCpu.map((n) => n.op));
    expect(floatOps).toContain('FusedMatMul');
    expect(floatOps).toContain('LogSoftmax');
    expect(floatOps).toContain('OneHot');
  });

  it('catches what it is for: the CPU graph on WebGPU waits for the device (copies to the host, Ifs)', async () => {
    const { model, options } = graphFor(makeFixture(FAMILY_FIXTURES.llama!), 'cpu');
    const { waits } = await placements(model, options, { waits: true });
    expect(waits!.filter((w) => w.op === 'MemcpyToHost').length).toBeGreaterThan(0);
    expect(waits!.filter((w) => w.op === 'If').length).toBeGreaterThan(0);
  });

  it.each([
    ...Object.keys(FAMILY_FIXTURES).map((f) => [f, 'float32'] as const),
    ['mixtral', 'float16'] as const,
    ['gemma2', 'float16'] as const,
  ])('%s (%s): the WebGPU graph leaves no float op to the CPU and never waits for the device; what stays is index arithmetic', async (family, dtype) => {
    const fx = makeFixture(FAMILY_FIXTURES[family]!);
    const { model, options } = graphFor(fx, 'webgpu', dtype);
    const placed = await placements(model, options, { waits: true });
    expect(placed.floatOnCpu).toEqual([]);
    // Nothing in a pass waits for the device: no copy to the host, no If (on an H100 each
    // cost about 1 ms: bench/GPU-HISTORY.md, "No waits inside a pass"). A mixture of experts is the
    // exception, in its router only: which tokens each expert takes sets the shapes of
    // what follows, so the host reads it back (a layer's top experts, and each expert's
    // token rows).
    const moe = readModelConfig(fx.dir).moe !== undefined;
    const routing = (w: { op: string; name: string }) => w.op === 'MemcpyToHost' && /\/mlp\/(top_experts|output_rows|experts\.\d+\/nonzero_mask)\//.test(w.name);
    expect(placed.waits!.filter((w) => !(moe && routing(w)))).toEqual([]);
    if (moe) expect(placed.waits!.length).toBeGreaterThan(0);
    expect((placed.byProvider.get('WebGpuExecutionProvider') ?? []).length).toBeGreaterThan(100);
    // The probe's key bins are int32 on the device: the heatmap's copy of them per query
    // row (an Expand of [B, T, S]) was made on the CPU and sent up, 2 × 18 MB a pass of an
    // 8k probe on the H100.
    expect(placed.cpuOps.Expand ?? 0).toBe(0);
    // The MatMuls are the device's.
    expect(placed.byProvider.get('WebGpuExecutionProvider')!.some((n) => n.op === 'MatMul')).toBe(true);
  });

  // Each host value a device kernel reads is a staging buffer made and copied on every run,
  // the costliest node of a decode step on the host (index-feeds.ts). The scoring graph's
  // index feeds (ids, positions, slots, rows) go up as one; its past and its weights
  // (`device/…`, graph/device-weights.ts) come as device tensors.
  it.each(Object.keys(FAMILY_FIXTURES))('%s: the scoring graph takes one upload a pass, its index feeds, and no other host value reaches a device kernel', async (family) => {
    const fx = makeFixture(FAMILY_FIXTURES[family]!);
    const { model, options } = graphFor(fx, 'webgpu', 'float32', false);
    const placed = await placements(model, options, { waits: true });
    // A mixture of experts reads its routing back (above) and sends each expert's rows up.
    const moe = readModelConfig(fx.dir).moe !== undefined;
    const routing = (u: { name: string }) => moe && /\/mlp\/(experts\.\d+\/|expert_\d+_rows)/.test(u.name);
    expect(placed.uploads!.filter((u) => !/^(past|recent)\.\d+\.|^device\//.test(u.name) && !routing(u))).toEqual([{ op: 'input', name: 'index_feeds' }]);
    if (moe) expect(placed.uploads!.filter(routing).length).toBeGreaterThan(0);
    // What stays on the CPU otherwise is the shapes and the slot count made of the size.*
    // inputs (a Range's limit), host values all.
    else expect(Object.keys(placed.cpuOps).sort()).toEqual(['Cast', 'Concat', 'Squeeze']);
  });
});

// The provider's reductions pick their workgroup by the tensor's shape: a tensor of one row
// (the final norm and log-softmax of a pass that scores one token) takes a 256-wide one
// instead of 64 and sums in another order. The fixtures' widths (32, 300 logits) are too
// small to show it; a real model's (960–4096 hidden, 32,000+ logits) are not. The builder's
// WebGPU forms sum a row alike whatever the pass's shape: for a layer's norms (4 rows or
// more) the provider's fused kernels, for the final norm and log-softmax MatMul sums.
maybe('WebGPU placements of the KV layout graph', () => {
  it('every node of a layout (the flat index included: int32 Mul and Add) runs on the provider, and nothing waits for the device', async () => {
    const model = buildKvLayoutGraph({ tensors: 4, kvHeads: 2, headDim: 16, dtype: 'float32' }, 4);
    const placed = await placements(model, resolveDevice({ device: 'webgpu', threads: 1 }).sessionOptions, { waits: true });
    expect(placed.byProvider.get('CPUExecutionProvider') ?? []).toEqual([]);
    expect(placed.waits).toEqual([]);
    const ops = new Set(placed.byProvider.get('WebGpuExecutionProvider')!.map((n) => n.op));
    for (const op of ['Mul', 'Add', 'Concat', 'Gather']) expect(ops).toContain(op);
  });
});

maybe('WebGPU reductions at real widths: a row alone is the bits it gets among others', () => {
  type Form = RowForm;
  const weight = (g: GraphBuilder, w: number, shift = 0) => g.constant('float32', [w], Array.from({ length: w }, (_, i) => 0.5 + (i % 7) / 7 - shift));
  const rmsNorm = (rows: NormRows): Form => (g, x, w) => g.rmsNorm(x, () => weight(g, w), w, 1e-5, rows);
  const layerNorm = (rows: NormRows): Form => (g, x, w) => g.layerNorm(x, weight(g, w), weight(g, w, 0.6), w, 1e-5, rows);
  const logSoftmax: Form = (g, x, w) => g.logSoftmax(x, w);

  it('catches what it is for: alone, the provider\'s ReduceMean, fused norms and ReduceLogSumExp move a row', async () => {
    const reduceMean: Form = (g, x) => g.node('ReduceMean', [g.node('Pow', [x, g.scalar(2)]), g.ints([-1])], { attrs: { keepdims: 1 } });
    const lse: Form = (g, x) => g.node('Sub', [x, g.node('ReduceLogSumExp', [x, g.ints([1])], { attrs: { keepdims: 1 } })]);
    expect(await rowsThatDiffer(reduceMean, 960)).toBeGreaterThan(0);
    expect(await rowsThatDiffer(layerNorm('several'), 1024)).toBeGreaterThan(0);
    expect(await rowsThatDiffer(rmsNorm('several'), 3072)).toBeGreaterThan(0);
    expect(await rowsThatDiffer(lse, 49152)).toBeGreaterThan(0);
  });

  it.each([960, 1024, 3072, 4096])('norms over %i features: the final norm\'s forms alone, a layer\'s in 4 rows', async (width) => {
    expect(await rowsThatDiffer(rmsNorm('any'), width)).toBe(0);
    expect(await rowsThatDiffer(layerNorm('any'), width)).toBe(0);
    expect(await rowsThatDiffer(rmsNorm('several'), width, 24, 4)).toBe(0);
    expect(await rowsThatDiffer(layerNorm('several'), width, 24, 4)).toBe(0);
  });

  it.each([32000, 49152])('log-softmax over %i logits', async (width) => {
    expect(await rowsThatDiffer(logSoftmax, width, 12)).toBe(0);
  });

  // The same through the engine: one-token continuations (lm-eval's multiple choice with
  // one-token answers) scored alone and 32 at once, at a hidden size of 1024: the token's
  // log-prob and the top 8 of its position. With the provider's ReduceMean, LayerNormalization
  // and ReduceLogSumExp all three families failed here (values off by an ulp or two).
  // The CPU provider's graph, unchanged, passes it too.
  it.each(['llama', 'gpt2', 'qwen3'].flatMap((f) => [[f, 'webgpu'], [f, 'cpu']]))('%s at hidden 1024 on %s: one-token continuations, batched = alone', async (family, device) => {
    const base = FAMILY_FIXTURES[family]!;
    const fx = makeFixture({ ...base, hidden: 1024, heads: 16, kvHeads: base.kvHeads === base.heads ? 16 : 4, headDim: 64, intermediate: 256, layers: 1 });
    const engine = await Engine.load(fx.dir, { device, threads: 1 });
    try {
      const r = rng(3);
      const requests = Array.from({ length: 32 }, (_, i) => {
        const seq = randomTokens(r, 4 + (i % 9), engine.config.vocabSize);
        return { context: seq.slice(0, -1), continuations: [seq.slice(-1)], topK: 8 };
      });
      const scoring = directScoring(new Scorer(engine, { prefixSharing: false }));
      // The token's log-prob and its position's 8 most likely: 9 values a request.
      const values = (a: Awaited<ReturnType<typeof scoring.loglikelihood>>[number]) => [a[0]!.tokenLogprobs[0], ...a[0]!.topK![0]!.logprobs];
      const batched = (await scoring.loglikelihood(requests)).map(values);
      const alone = [];
      for (const request of requests) alone.push(values((await scoring.loglikelihood([request]))[0]!));
      expect(alone).toEqual(batched);
    } finally {
      await engine.release();
    }
  });
});

// A greedy step's token on WebGPU comes from top1_* (kernels/logprobs.ts), not TopK: the
// same id (the lowest on a tie, as TopK orders) and the bits of TopK's first log-prob.
maybe('WebGPU: the top token without TopK', () => {
  it.each([300, 49152])('over %i logits, ties and ends included, equals TopK(1) and the first maximum', async (vocab) => {
    const g = new GraphBuilder('webgpu');
    const logits = g.input('logits', 'float32', ['N', vocab]);
    const k = logprobKernel(g, logits, vocab, g.input('target_ids', 'int32', ['N']), g.input('top_k', 'int64', [1]), g.input('next_rows', 'int32', ['M']));
    g.output('top1_ids', k.top1!.ids, 'int64', ['N']);
    g.output('top1_logprobs', k.top1!.logprobs, 'float32', ['N']);
    g.output('topk_ids', k.topkIds, 'int64', ['N', 'k']);
    g.output('topk_logprobs', k.topkLogprobs, 'float32', ['N', 'k']);
    const session = await ort.InferenceSession.create(g.encode('top1'), { executionProviders: ['webgpu'] });
    try {
      const r = rng(vocab);
      const N = 8;
      const data = Float32Array.from({ length: N * vocab }, () => (r() - 0.5) * 20);
      const put = (row: number, ids: number[]) => ids.forEach((id) => (data[row * vocab + id] = 50));
      put(0, [0]);
      put(1, [vocab - 1]);
      put(2, [7, 9]); // a tie: 7
      put(3, [vocab - 1, vocab - 2, 5]); // 5
      put(4, [0, vocab - 1]); // 0
      const feeds = {
        logits: new ort.Tensor('float32', data, [N, vocab]),
        target_ids: new ort.Tensor('int32', new Int32Array(N), [N]),
        top_k: new ort.Tensor('int64', BigInt64Array.from([1n]), [1]),
        next_rows: new ort.Tensor('int32', new Int32Array(0), [0]),
      };
      const out = await session.run(feeds);
      const firstMax = Array.from({ length: N }, (_, n) => {
        const row = data.subarray(n * vocab, (n + 1) * vocab);
        return BigInt(row.indexOf(maxOf(row)));
      });
      expect(Array.from(out.top1_ids!.data as BigInt64Array)).toEqual(firstMax);
      expect(Array.from(out.topk_ids!.data as BigInt64Array)).toEqual(firstMax);
      expect(Array.from(out.top1_logprobs!.data as Float32Array)).toEqual(Array.from(out.topk_logprobs!.data as Float32Array));
      expect(firstMax.slice(0, 5)).toEqual([0n, BigInt(vocab - 1), 7n, 5n, 0n]);
    } finally {
      await session.release();
    }
  });
});

// The probe's votes take each query row's first most attended key (kernels/attention.ts,
// firstMax): on WebGPU by reductions, not the provider's one-thread-a-row ArgMax.
maybe("WebGPU: a row's first maximum without ArgMax", () => {
  it.each([300, 8192])('over %i keys, ties and ends included, equals ArgMax on the CPU and the first maximum', async (S) => {
    const run = async (target: 'webgpu' | 'cpu', data: Float32Array, R: number) => {
      const g = new GraphBuilder(target);
      const x = g.input('x', 'float32', ['R', S]);
      const ids = target === 'webgpu' ? g.cast(g.node('Range', [g.constant('int32', [], [0]), g.constant('int32', [], [S]), g.constant('int32', [], [1])]), 'float32', 'int32') : undefined;
      g.output('index', firstMax(g, x, ids, 'first'), 'int64', ['R', 1]);
      const session = await ort.InferenceSession.create(g.encode('first'), { executionProviders: [target] });
      try {
        return Array.from((await session.run({ x: new ort.Tensor('float32', data, [R, S]) })).index!.data as BigInt64Array);
      } finally {
        await session.release();
      }
    };
    const r = rng(S);
    const R = 6;
    const data = Float32Array.from({ length: R * S }, () => r() / S);
    const put = (row: number, ids: number[]) => ids.forEach((id) => (data[row * S + id] = 0.5));
    put(0, [0]);
    put(1, [S - 1]);
    put(2, [7, 9]);
    put(3, [S - 1, S - 2, 5]);
    put(4, [0, S - 1]);
    const firsts = Array.from({ length: R }, (_, n) => BigInt(data.subarray(n * S, (n + 1) * S).indexOf(maxOf(data.subarray(n * S, (n + 1) * S)))));
    expect(firsts.slice(0, 5)).toEqual([0n, BigInt(S - 1), 7n, 5n, 0n]);
    expect(await run('webgpu', data, R)).toEqual(firsts);
    expect(await run('cpu', data, R)).toEqual(firsts);
  });
});

maybe('WebGPU against the CPU provider, every family', () => {
  for (const family of Object.keys(FAMILY_FIXTURES)) {
    describe(family, () => {
      let cpu: Engine;
      let gpu: Engine;
      beforeAll(async () => {
        const fx = makeFixture(FAMILY_FIXTURES[family]!);
        [cpu, gpu] = await Promise.all([Engine.load(fx.dir, { threads: 1 }), Engine.load(fx.dir, { device: 'webgpu', threads: 1 })]);
      });
      afterAll(async () => Promise.all([cpu?.release(), gpu?.release()]));

      // Batched = alone, bit for bit, on the device: the per-head query norms of Qwen3,
      // Qwen3-MoE and Gemma 3 took their mean in a shape-dependent order (52–96 of 195
      // log-probs differed before the builder's rowMean).
      it('scores each sequence of a batch to the bits it gets alone', async () => {
        const requests = continuations(rng(5), 6, 20, 7, gpu.config.vocabSize);
        const scoring = directScoring(new Scorer(gpu, { prefixSharing: false }));
        const batched = await scoring.loglikelihood(requests);
        for (const [i, request] of requests.entries()) {
          const [alone] = await scoring.loglikelihood([request]);
          expect(alone![0]!.tokenLogprobs).toEqual(batched[i]![0]!.tokenLogprobs);
        }
      });

      it('log-probs, top-k and attention statistics agree to float32 rounding, also after a cached past laid out on the device', async () => {
        expect(gpu.info.device).toBe('webgpu');
        expect(gpu.info.floatNodesOnCpu).toEqual([]);
        const vocab = cpu.config.vocabSize;
        const r = rng(3);
        const prompt = randomTokens(r, 14, vocab);
        const more = randomTokens(r, 5, vocab);
        const probe = (n: number, past: number) => ({
          keyBins: Array.from({ length: past + n }, (_, j) => (j === 0 ? 3 : j % 3)),
          chunks: 3,
          queryWeights: Array(n).fill(1),
        });
        const first = (e: Engine): ForwardRequest => ({
          rows: [{ tokens: prompt, startPosition: 0, pastRow: 0, probe: probe(prompt.length, 0) }],
          scored: prompt.slice(1).map((target, i) => ({ row: 0, index: i, target })),
          topK: 3,
          keepPresent: true,
          heatmap: true,
        });
        const results = [];
        for (const e of [cpu, gpu]) {
          const a = await e.forward(first(e));
          // Two rows continuing the first pass's one row (a layout on the device), then a
          // row continuing a gathered past made of two pieces.
          const b = await e.forward({
            rows: [0, 1].map((k) => ({ tokens: more.slice(k), startPosition: prompt.length, pastRow: 0 })),
            past: a.present,
            scored: more.slice(1).map((target, i) => ({ row: 0, index: i, target })),
            topK: 0,
            keepPresent: true,
          });
          const joined = await e.gatherPast([
            [
              { handle: a.present!.handle, row: 0, offset: 0, count: prompt.length },
              { handle: b.present!.handle, row: 1, offset: prompt.length, count: 4 },
            ],
          ]);
          const c = await e.forward({
            rows: [{ tokens: [7, 8], startPosition: prompt.length + 4, pastRow: 0 }],
            past: joined,
            scored: [{ row: 0, index: 0, target: 8 }],
            topK: 0,
            keepPresent: false,
          });
          for (const p of [a.present!, b.present!, joined]) e.dropPast(p);
          expect(await e.keptPasts()).toBe(0);
          expect(await e.keptTensors()).toBe(0);
          results.push({ a, b, c });
        }
        const [x, y] = results as [(typeof results)[0], (typeof results)[0]];
        const close = (p: ArrayLike<number>, q: ArrayLike<number>, tol: number) => {
          expect(p.length).toBe(q.length);
          for (let i = 0; i < p.length; i++) expect(Math.abs(p[i]! - q[i]!), `[${i}] ${p[i]} vs ${q[i]}`).toBeLessThan(tol);
        };
        close(x.a.logprobs, y.a.logprobs, 1e-5);
        close(x.a.topkLogprobs!, y.a.topkLogprobs!, 1e-5);
        close(x.b.logprobs, y.b.logprobs, 1e-5);
        close(x.c.logprobs, y.c.logprobs, 1e-5);
        close(x.a.probe!.mass, y.a.probe!.mass, 1e-5);
        close(x.a.probe!.sinkMass, y.a.probe!.sinkMass, 1e-5);
        // Per query slot: the device pads its passes' query slots to a multiple of four.
        const rows = (p: NonNullable<typeof x.a.probe>, m: Float32Array) => m.subarray(0, prompt.length * p.bins);
        close(rows(x.a.probe!, x.a.probe!.heat.max.keyMax), rows(y.a.probe!, y.a.probe!.heat.max.keyMax), 1e-5);
        close(rows(x.a.probe!, x.a.probe!.heat.mean.keySum), rows(y.a.probe!, y.a.probe!.heat.mean.keySum), 1e-5);
      });
    });
  }
});

maybe('the contracts on the device', () => {
  let engine: Engine;
  beforeAll(async () => {
    engine = await Engine.load(makeFixture(FAMILY_FIXTURES.llama!).dir, { device: 'webgpu', threads: 1 });
  });
  afterAll(() => engine?.release());

  it('a probing pass (its own session on WebGPU) gives a token the bits a scoring pass gives it, and either continues the KV the other kept', async () => {
    const vocab = engine.config.vocabSize;
    const r = rng(5);
    const tokens = randomTokens(r, 13, vocab);
    const next = randomTokens(r, 5, vocab);
    const scoredAll = (n: number, ids: number[]) => Array.from({ length: n - 1 }, (_, i) => ({ row: 0, index: i, target: ids[i + 1]! }));
    const first = (probe: boolean): ForwardRequest => ({
      rows: [
        {
          tokens,
          startPosition: 0,
          pastRow: 0,
          ...(probe ? { probe: { keyBins: tokens.map((_, i) => (i < 6 ? 0 : 1)), chunks: 2, queryWeights: tokens.map(() => 1) } } : {}),
        },
      ],
      scored: scoredAll(tokens.length, tokens),
      topK: 3,
      keepPresent: true,
    });
    const scored = await engine.forward(first(false));
    const probed = await engine.forward(first(true));
    expect(probed.probe).toBeDefined();
    expect(probed.logprobs).toEqual(scored.logprobs);
    expect(probed.topkLogprobs).toEqual(scored.topkLogprobs);
    expect(probed.topkIds).toEqual(scored.topkIds);
    // The next tokens after either pass's kept KV, in the scoring session.
    const after = async (present: PastKV) =>
      engine.forward({
        rows: [{ tokens: next, startPosition: tokens.length, pastRow: 0 }],
        past: present,
        scored: scoredAll(next.length, next),
        topK: 0,
        keepPresent: false,
      });
    const fromScored = await after(scored.present!);
    const fromProbed = await after(probed.present!);
    expect(fromProbed.logprobs).toEqual(fromScored.logprobs);
    // And a probing pass after the scoring pass's KV: the same bits again.
    const probedAfter = await engine.forward({
      rows: [{ tokens: next, startPosition: tokens.length, pastRow: 0, probe: { keyBins: [...tokens, ...next].map(() => 0), chunks: 1, queryWeights: next.map(() => 1) } }],
      past: scored.present!,
      scored: scoredAll(next.length, next),
      topK: 0,
      keepPresent: false,
    });
    expect(probedAfter.logprobs).toEqual(fromScored.logprobs);
    engine.dropPast(scored.present!);
    engine.dropPast(probed.present!);
  });

  // The prefix cache takes a running generation's row whole every 16 tokens (runner.ts,
  // COMPACT_PIECES); 16 streams made 16 layout runs of ~12 ms each on the H100.
  it("the rows of a pass taken whole at once are one layout, each row's KV continuing to Score's bits", async () => {
    const vocab = engine.config.vocabSize;
    const r = rng(29);
    const prompts = [randomTokens(r, 11, vocab), randomTokens(r, 7, vocab), randomTokens(r, 9, vocab)];
    const next = prompts.map(() => randomTokens(r, 1, vocab)[0]!);
    const last = prompts.map(() => randomTokens(r, 1, vocab)[0]!);
    const first = await engine.forward({
      rows: prompts.map((tokens, b) => ({ tokens, startPosition: 0, pastRow: b })),
      scored: [],
      topK: 0,
      keepPresent: true,
    });
    // A decode step on that past: its present holds the past and the step's new KV apart.
    const step = await engine.forward({
      rows: prompts.map((p, b) => ({ tokens: [next[b]!], startPosition: p.length, pastRow: b })),
      past: first.present!,
      scored: [],
      topK: 0,
      keepPresent: true,
    });
    const before = await engine.kvLayoutRuns();
    const whole = await engine.gatherPasts(prompts.map((p, b) => [[{ handle: step.present!.handle, row: b, offset: 0, count: p.length + 1 }]]));
    expect((await engine.kvLayoutRuns()) - before).toBe(1);
    const uncached = directScoring(new Scorer(engine, { prefixSharing: false, prefixCacheBytes: 0 }));
    for (const [b, p] of prompts.entries()) {
      const out = await engine.forward({
        rows: [{ tokens: [last[b]!], startPosition: p.length + 1, pastRow: 0 }],
        past: whole[b]!,
        scored: [{ row: 0, index: 0, target: 5 }],
        topK: 1,
        keepPresent: false,
      });
      const [score] = await uncached.loglikelihood([{ context: [...p, next[b]!, last[b]!], continuations: [[5]], topK: 1 }]);
      expect(out.logprobs[0]).toBe(score![0]!.tokenLogprobs[0]);
      expect(Number(out.topkIds![0])).toBe(score![0]!.topK![0]!.ids[0]);
      expect(out.topkLogprobs![0]).toBe(score![0]!.topK![0]!.logprobs[0]);
    }
    for (const p of [first.present!, step.present!, ...whole]) engine.dropPast(p);
  });

  it('a decode step reads the step before it as it lies, with no layout of its past, one stream or several, and keeps the contracts', async () => {
    const vocab = engine.config.vocabSize;
    const r = rng(23);
    // One stream of a 16-token prompt (the prompt's KV one whole piece), then three of
    // different lengths (their pasts ragged).
    for (const prompts of [[randomTokens(r, 16, vocab)], [randomTokens(r, 16, vocab), randomTokens(r, 9, vocab), randomTokens(r, 13, vocab)]]) {
      const scorer = new Scorer(engine, { prefixCacheBytes: 2 ** 24 });
      const batcher = new Batcher('m', scorer);
      const before = await engine.laidOutKvBytes();
      const steps = 12;
      const together = await runGenerations(
        prompts.map((p) => new Generation(generationModel(engine, scorer), p, { ...GREEDY, maxTokens: steps })),
        (u, c) => batcher.submit(u, { continuing: c }).result,
      );
      const copied = (await engine.laidOutKvBytes()) - before;
      // Laying out each step's past copies every row's whole past each step: step k of a
      // row of p prompt tokens, p + k slots. Continuing the last step's keys as they lie, one
      // stream lays out only its first step's new token, and ragged rows lay out again only
      // when their slots grow past the last step's (one step in four).
      const everyStep = prompts.reduce((n, p) => n + Array.from({ length: steps - 1 }, (_, k) => p.length + k + 1).reduce((a, b) => a + b, 0), 0);
      expect(copied).toBeLessThan((everyStep * engine.kvBytesPerToken) / (prompts.length === 1 ? 50 : 2));
      for (const [i, [choice]] of together.entries()) {
        const seq = prompts[i]!.concat(choice!.tokens);
        for (const [k, token] of choice!.tokens.entries()) {
          const [score] = await directScoring(new Scorer(engine, { prefixSharing: false, prefixCacheBytes: 0 })).loglikelihood([
            { context: seq.slice(0, prompts[i]!.length + k), continuations: [[token]] },
          ]);
          expect(choice!.logprobs[k]).toBe(score![0]!.tokenLogprobs[0]);
        }
      }
    }
  });

  it("greedy streams without alternatives (each token from top1, not TopK) past the cache's compaction: Score's token and bits", async () => {
    const vocab = engine.config.vocabSize;
    const r = rng(31);
    const prompts = [randomTokens(r, 14, vocab), randomTokens(r, 5, vocab), randomTokens(r, 9, vocab)];
    const scorer = new Scorer(engine);
    const batcher = new Batcher('m', scorer);
    const before = await engine.kvLayoutRuns();
    const together = await runGenerations(
      prompts.map((p) => new Generation(generationModel(engine, scorer), p, { ...GREEDY, logprobs: 0, maxTokens: 20 })),
      (u, c) => batcher.submit(u, { continuing: c }).result,
    );
    expect((await engine.kvLayoutRuns()) - before).toBeGreaterThan(0);
    const uncached = directScoring(new Scorer(engine, { prefixSharing: false, prefixCacheBytes: 0 }));
    for (const [i, [choice]] of together.entries()) {
      expect(choice!.tokens).toHaveLength(20);
      const seq = prompts[i]!.concat(choice!.tokens);
      for (const [k, token] of choice!.tokens.entries()) {
        const [score] = await uncached.loglikelihood([{ context: seq.slice(0, prompts[i]!.length + k), continuations: [[token]], topK: 2 }]);
        expect(choice!.logprobs[k]).toBe(score![0]!.tokenLogprobs[0]);
        expect(score![0]!.topK![0]!.ids[0]).toBe(token);
      }
    }
  });

  it("a generated token's log-prob is the bits Score gives it on the device; batched = alone; cached = uncached", async () => {
    const vocab = engine.config.vocabSize;
    const r = rng(11);
    const prompts = [randomTokens(r, 19, vocab), randomTokens(r, 6, vocab), randomTokens(r, 11, vocab)];
    const scorer = new Scorer(engine, { maxBatchTokens: 16 });
    const batcher = new Batcher('m', scorer);
    const together = await runGenerations(
      prompts.map((p) => new Generation(generationModel(engine, scorer), p, GREEDY)),
      (u, c) => batcher.submit(u, { continuing: c }).result,
    );
    const uncached = new Scorer(engine, { prefixSharing: false, prefixCacheBytes: 0 });
    for (const [i, [choice]] of together.entries()) {
      const seq = prompts[i]!.concat(choice!.tokens);
      for (const [k, token] of choice!.tokens.entries()) {
        const score = (
          await directScoring(uncached).loglikelihood([{ context: seq.slice(0, prompts[i]!.length + k), continuations: [[token]], topK: 1 }])
        )[0]![0]!;
        expect(choice!.logprobs[k]).toBe(score.tokenLogprobs[0]);
        expect(score.topK![0]!.ids[0]).toBe(token);
      }
      const solo = new Scorer(engine);
      const soloBatcher = new Batcher('solo', solo);
      const [alone] = await runGenerations(
        [new Generation(generationModel(engine, solo), prompts[i]!, GREEDY)],
        (u, c) => soloBatcher.submit(u, { continuing: c }).result,
      );
      expect(alone![0]!.tokens).toEqual(choice!.tokens);
      expect(alone![0]!.logprobs).toEqual(choice!.logprobs);
      expect(alone![0]!.top).toEqual(choice!.top);
    }
  });
});

maybe('a mixture of experts on the device, 4 experts a token of 8', () => {
  // The provider's ScatterND adds with atomics in no fixed order: the same batch scored
  // five times differed in 190 of 1,360 log-probs, and a sequence alone from the batch in
  // 55 of 272. The WebGPU graph sums each token's experts by gathers, in expert order.
  let gpu: Engine;
  let cpu: Engine;
  beforeAll(async () => {
    const base = FAMILY_FIXTURES.mixtral!;
    const fx = makeFixture({ ...base, seed: 41, extraConfig: { ...base.extraConfig, num_local_experts: 8, num_experts_per_tok: 4 } });
    gpu = await Engine.load(fx.dir, { device: 'webgpu', threads: 1 });
    cpu = await Engine.load(fx.dir, { threads: 1 });
  });
  afterAll(async () => {
    await gpu?.release();
    await cpu?.release();
  });

  it('scores a batch the same every time, each sequence as alone, and as the CPU provider to float32 rounding', async () => {
    const requests = continuations(rng(9), 8, 30, 5, gpu.config.vocabSize);
    const scoring = directScoring(new Scorer(gpu, { prefixSharing: false }));
    const logprobs = (answer: Awaited<ReturnType<typeof scoring.loglikelihood>>) => answer.map((a) => a[0]!.tokenLogprobs);
    const first = logprobs(await scoring.loglikelihood(requests));
    for (let n = 0; n < 2; n++) expect(logprobs(await scoring.loglikelihood(requests))).toEqual(first);
    for (const [i, request] of requests.entries()) expect(logprobs(await scoring.loglikelihood([request]))[0]).toEqual(first[i]);
    const reference = logprobs(await directScoring(new Scorer(cpu, { prefixSharing: false })).loglikelihood(requests));
    const worst = maxOf(first.flatMap((row, i) => row.map((v, t) => Math.abs(v - reference[i]![t]!))));
    expect(worst).toBeLessThan(1e-5);
  });
});

maybe('--gpu-buffer-cache, as an operator sets it', () => {
  it('simple (by the flag) takes 8192-token passes and scores as bucket does (by the environment, in 512-token passes); on the CPU it is refused, naming the flag', async () => {
    const dir = makeFixture(FAMILY_FIXTURES.llama!).dir;
    const served = [
      await serveCli(dir, ['--device', 'webgpu', '--gpu-buffer-cache', 'simple']),
      await serveCli(dir, ['--device', 'webgpu'], { CTXPROBE_GPU_BUFFER_CACHE: 'bucket' }),
    ];
    try {
      const loaded = served.map((s) => s.lines.find((l) => l.event === 'model_loaded')!);
      expect(loaded.map((l) => [l.gpuBufferCache, l.maxBatchTokens])).toEqual([
        ['simple', 8192],
        ['bucket', 512],
      ]);
      const [a, b] = await Promise.all(
        served.map(async (s, i) => {
          const body = { model: loaded[i]!.model, prompt: 'The tower was built in the year', max_tokens: 0, echo: true, logprobs: 1 };
          return (await postJson(`http://127.0.0.1:${s.httpPort}`, '/v1/completions', body)).body;
        }),
      );
      expect(a.choices[0].logprobs.token_logprobs.length).toBeGreaterThan(3);
      expect(a.choices[0].logprobs.token_logprobs).toEqual(b.choices[0].logprobs.token_logprobs);
    } finally {
      for (const s of served) expect(await s.stop()).toBe(0);
    }
    const refused = await serveCli(dir, ['--device', 'cpu', '--gpu-buffer-cache', 'simple']).then(
      (s) => (s.stop(), new Error('it served')),
      (e) => e,
    );
    expect(refused.message).toMatch(/gpuBufferCache \(--gpu-buffer-cache\) is a setting of device webgpu, not cpu/);
  });
  it('gpuBufferCache in a model file of the repository (--models) takes effect; a value it does not know, or the key on a CPU model, is refused naming it', async () => {
    const dir = tempDir('gpu-cache-repo');
    const model = makeFixture(FAMILY_FIXTURES.llama!).dir;
    fs.writeFileSync(path.join(dir, 'gpu.json'), JSON.stringify({ name: 'gpu', path: model, device: 'webgpu', gpuBufferCache: 'simple' }));
    const s = await serveCli('', ['--models', dir]);
    try {
      const loaded = s.lines.find((l) => l.event === 'model_loaded')!;
      expect([loaded.model, loaded.gpuBufferCache, loaded.maxBatchTokens]).toEqual(['gpu', 'simple', 8192]);
    } finally {
      expect(await s.stop()).toBe(0);
    }
    const refusal = async (entry: object) => {
      fs.writeFileSync(path.join(dir, 'gpu.json'), JSON.stringify({ name: 'gpu', path: model, ...entry }));
      return serveCli('', ['--models', dir]).then(
        (served) => (served.stop(), new Error('it served')),
        (e: Error) => e,
      );
    };
    expect((await refusal({ device: 'webgpu', gpuBufferCache: 'huge' })).message).toMatch(/gpu\.json: gpuBufferCache must be equal to one of the allowed values/);
    expect((await refusal({ device: 'cpu', gpuBufferCache: 'simple' })).message).toMatch(/gpuBufferCache \(--gpu-buffer-cache\) is a setting of device webgpu, not cpu/);
  });
});

maybe('ctxprobe on --device webgpu, as an operator runs it', () => {
  let server: CtxprobeServer;
  let base: string;
  beforeAll(async () => {
    const model = await loadModel({
      name: 'gpu',
      path: makeFixture(FAMILY_FIXTURES.llama!).dir,
      device: 'webgpu',
      threads: 1,
      prefixCacheBytes: 0,
    });
    server = await CtxprobeServer.start({ port: 0, metricsPort: 0, httpPort: 0 });
    server.addModel(model);
    server.setServing();
    base = `http://127.0.0.1:${server.httpPort}`;
  });
  afterAll(async () => server?.close());

  it('ListModels names the device and the adapter; a decode step moves no KV between host and device, under 64 KiB in all', async () => {
    const listed = await (await fetch(`${base}/v1/list-models`)).json();
    const info = listed.models[0];
    expect(info.device).toBe('webgpu');
    expect(info.adapter).toMatch(/Vulkan/);
    const before = await scrape(server.metricsPort!);
    const steps = 12;
    const res = await postJson(base, '/v1/completions', {
      model: 'gpu',
      prompt: 'The tower was built in',
      max_tokens: steps,
      temperature: 0,
      ignore_eos: true,
    });
    expect(res.status).toBe(200);
    const after = await scrape(server.metricsPort!);
    const delta = (what: string) =>
      (after.get(`ctxprobe_forward_pass_bytes_total{model="gpu",what="${what}"}`) ?? 0) -
      (before.get(`ctxprobe_forward_pass_bytes_total{model="gpu",what="${what}"}`) ?? 0);
    const passes =
      (after.get('ctxprobe_forward_passes_total{model="gpu",kind="score"}') ?? 0) -
      (before.get('ctxprobe_forward_passes_total{model="gpu",kind="score"}') ?? 0);
    expect(passes).toBeGreaterThanOrEqual(steps);
    expect(delta('past_kv')).toBe(0);
    expect(delta('present_kv')).toBe(0);
    // Token ids and positions go in, log-probs come out (the inputs counted 0 bytes while
    // their buffers were measured after the run had transferred them).
    expect(delta('inputs')).toBeGreaterThan(0);
    expect(delta('outputs')).toBeGreaterThan(0);
    expect((delta('inputs') + delta('outputs')) / passes).toBeLessThan(64 * 1024);
  });
});
