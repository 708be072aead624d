// Attention ops on the CPU execution provider, for the shapes ctxprobe runs: one attention
// layer (8 query / 4 key-value heads of 64, as the bench model) with a past KV and a
// causal mask, built four ways — today's MatMul + Softmax (grouped heads by broadcasting;
// it gives the probabilities the probes need), com.microsoft.MultiHeadAttention (K/V
// repeated to every head: it has no grouped-query heads), com.microsoft.GroupQueryAttention
// and the ONNX Attention op (opset 23); for decode steps also GroupQueryAttention with its
// present bound to the past's own buffer (capacity BENCH_KV_CAPACITY slots, 4096 unless
// set), onnxruntime's in-place KV append. Prints median ms of 5 runs and the largest |Δ| of
// the output against MatMul + Softmax; asserts nothing.
import os from 'node:os';
import ort from 'onnxruntime-node';
import { GraphBuilder, float } from '../src/graph/builder.js';

const threads = Number(process.env.BENCH_THREADS ?? 0) || os.cpus().length;
const [HQ, HKV, D] = [8, 4, 64];
const G = HQ / HKV;
const scale = 1 / Math.sqrt(D);

interface Case {
  name: string;
  B: number;
  T: number;
  P: number;
}
const CASES: Case[] = [
  { name: 'prefill, 4 × 512 tokens', B: 4, T: 512, P: 0 },
  { name: 'query block, 1 × 1024 after 1024', B: 1, T: 1024, P: 1024 },
  { name: 'CHARPEval tails, 6 × 32 after 400', B: 6, T: 32, P: 400 },
  { name: 'decode step, 1 × 1 after 256', B: 1, T: 1, P: 256 },
  { name: 'decode step, 1 × 1 after 4000', B: 1, T: 1, P: 4000 },
];
/** The KV buffer's capacity when the present is written into the past's own buffer. */
const CAPACITY = Number(process.env.BENCH_KV_CAPACITY ?? 4096);

type Build = (g: GraphBuilder) => string;
const VARIANTS: { name: string; opset: number; build: Build; shared?: true }[] = [
  {
    name: 'MatMul + Softmax (today)',
    opset: 21,
    build: (g) => {
      const q = g.node('Transpose', [g.node('Reshape', [g.input('q', 'float32', ['B', 'T', HQ * D]), g.ints([0, 0, HKV, G, D])])], {
        attrs: { perm: [0, 2, 3, 1, 4] },
      });
      const kv = (x: string, past: string) =>
        g.node('Unsqueeze', [
          g.node('Concat', [g.input(past, 'float32', ['B', HKV, 'P', D]), g.node('Transpose', [g.node('Reshape', [g.input(x, 'float32', ['B', 'T', HKV * D]), g.ints([0, 0, HKV, D])])], { attrs: { perm: [0, 2, 1, 3] } })], {
            attrs: { axis: 2 },
          }),
          g.ints([2]),
        ]);
      const scores = g.node('FusedMatMul', [q, kv('k', 'past_k')], { domain: 'com.microsoft', attrs: { transB: 1, alpha: float(scale) } });
      const probs = g.node('Softmax', [g.node('Add', [scores, g.input('bias', 'float32', [1, 1, 1, 'T', 'S'])])], { attrs: { axis: -1 } });
      const ctx = g.node('MatMul', [probs, kv('v', 'past_v')]);
      return g.node('Reshape', [g.node('Transpose', [ctx], { attrs: { perm: [0, 3, 1, 2, 4] } }), g.ints([0, 0, HQ * D])]);
    },
  },
  {
    name: 'com.microsoft.MultiHeadAttention (K/V repeated)',
    opset: 21,
    build: (g) => {
      // Every query head gets its own copy of its key-value head.
      const repeatNew = (x: string) =>
        g.node('Reshape', [g.node('Expand', [g.node('Reshape', [g.input(x, 'float32', ['B', 'T', HKV * D]), g.ints([0, 0, HKV, 1, D])]), g.ints([1, 1, HKV, G, D])]), g.ints([0, 0, HQ * D])]);
      const repeatPast = (x: string) =>
        g.node('Reshape', [g.node('Expand', [g.node('Unsqueeze', [g.input(x, 'float32', ['B', HKV, 'P', D]), g.ints([2])]), g.ints([1, 1, G, 1, 1])]), g.ints([0, HQ, -1, D])]);
      const bias4 = g.node('Squeeze', [g.input('bias', 'float32', [1, 1, 1, 'T', 'S']), g.ints([0])]);
      const [out] = g.nodeN(
        'MultiHeadAttention',
        'mha',
        [g.input('q', 'float32', ['B', 'T', HQ * D]), repeatNew('k'), repeatNew('v'), '', '', bias4, repeatPast('past_k'), repeatPast('past_v')],
        { domain: 'com.microsoft', outputs: 3, attrs: { num_heads: HQ, scale: float(scale) } },
      );
      return out!;
    },
  },
  {
    name: 'com.microsoft.GroupQueryAttention',
    opset: 21,
    build: (g) => {
      const [out] = g.nodeN(
        'GroupQueryAttention',
        'gqa',
        [
          g.input('q', 'float32', ['B', 'T', HQ * D]),
          g.input('k', 'float32', ['B', 'T', HKV * D]),
          g.input('v', 'float32', ['B', 'T', HKV * D]),
          g.input('past_k', 'float32', ['B', HKV, 'P', D]),
          g.input('past_v', 'float32', ['B', HKV, 'P', D]),
          g.input('seqlens_k', 'int32', ['B']),
          g.input('total_sequence_length', 'int32', [1]),
        ],
        { domain: 'com.microsoft', outputs: 3, attrs: { num_heads: HQ, kv_num_heads: HKV, scale: float(scale) } },
      );
      return out!;
    },
  },
  {
    // The one way onnxruntime appends to a KV cache in place: present_k / present_v bound
    // (preallocated outputs) to the very buffers fed as past_k / past_v, of a fixed
    // capacity; the kernel writes the new slots and attends the first seqlens_k + 1.
    name: 'GroupQueryAttention, present in the past buffer',
    opset: 21,
    shared: true,
    build: (g) => {
      const [out, presentK, presentV] = g.nodeN(
        'GroupQueryAttention',
        'gqa',
        [
          g.input('q', 'float32', ['B', 'T', HQ * D]),
          g.input('k', 'float32', ['B', 'T', HKV * D]),
          g.input('v', 'float32', ['B', 'T', HKV * D]),
          g.input('past_k', 'float32', ['B', HKV, CAPACITY, D]),
          g.input('past_v', 'float32', ['B', HKV, CAPACITY, D]),
          g.input('seqlens_k', 'int32', ['B']),
          g.input('total_sequence_length', 'int32', [1]),
        ],
        { domain: 'com.microsoft', outputs: 3, attrs: { num_heads: HQ, kv_num_heads: HKV, scale: float(scale) } },
      );
      g.output('present_k', presentK!, 'float32', ['B', HKV, CAPACITY, D]);
      g.output('present_v', presentV!, 'float32', ['B', HKV, CAPACITY, D]);
      return out!;
    },
  },
  {
    name: 'ONNX Attention (opset 23)',
    opset: 23,
    build: (g) => {
      const heads = (x: string, h: number) => g.node('Transpose', [g.node('Reshape', [g.input(x, 'float32', ['B', 'T', h * D]), g.ints([0, 0, h, D])])], { attrs: { perm: [0, 2, 1, 3] } });
      const mask = g.node('Squeeze', [g.input('bias', 'float32', [1, 1, 1, 'T', 'S']), g.ints([0, 1, 2])]);
      const [out] = g.nodeN(
        'Attention',
        'attention',
        [heads('q', HQ), heads('k', HKV), heads('v', HKV), mask, g.input('past_k', 'float32', ['B', HKV, 'P', D]), g.input('past_v', 'float32', ['B', HKV, 'P', D])],
        { outputs: 3, attrs: { scale: float(scale) } },
      );
      return g.node('Reshape', [g.node('Transpose', [out!], { attrs: { perm: [0, 2, 1, 3] } }), g.ints([0, 0, HQ * D])]);
    },
  },
];

let seed = 3;
const random = (n: number) => Float32Array.from({ length: n }, () => ((seed = (seed * 16807) % 2147483647) / 2147483647 - 0.5) * 2);

function feeds(c: Case, names: readonly string[], shared = false): Record<string, ort.Tensor> {
  const S = c.P + c.T;
  // A shared buffer holds the past in its first P slots of CAPACITY (the rest unread).
  const pastSlots = shared ? CAPACITY : c.P;
  const past = () => {
    const data = new Float32Array(c.B * HKV * pastSlots * D);
    const values = random(c.B * HKV * c.P * D);
    for (let r = 0; r < c.B * HKV; r++) data.set(values.subarray(r * c.P * D, (r + 1) * c.P * D), r * pastSlots * D);
    return new ort.Tensor('float32', data, [c.B, HKV, pastSlots, D]);
  };
  const bias = new Float32Array(c.T * S);
  for (let t = 0; t < c.T; t++) for (let j = 0; j < S; j++) bias[t * S + j] = j <= c.P + t ? 0 : -1e30;
  const all: Record<string, ort.Tensor> = {
    q: new ort.Tensor('float32', random(c.B * c.T * HQ * D), [c.B, c.T, HQ * D]),
    k: new ort.Tensor('float32', random(c.B * c.T * HKV * D), [c.B, c.T, HKV * D]),
    v: new ort.Tensor('float32', random(c.B * c.T * HKV * D), [c.B, c.T, HKV * D]),
    past_k: past(),
    past_v: past(),
    bias: new ort.Tensor('float32', bias, [1, 1, 1, c.T, S]),
    seqlens_k: new ort.Tensor('int32', Int32Array.from({ length: c.B }, () => S - 1), [c.B]),
    total_sequence_length: new ort.Tensor('int32', Int32Array.from([S]), [1]),
  };
  return Object.fromEntries(names.map((n) => [n, all[n]!]));
}

console.log(`ctxprobe attention ops on the CPU EP — ${threads} thread(s), ${HQ} query / ${HKV} key-value heads of ${D}; median of 5 runs`);
for (const c of CASES) {
  console.log(`\n${c.name}`);
  seed = 3;
  let reference: Float32Array | undefined;
  for (const v of VARIANTS) {
    if (v.shared && (c.B > 1 || c.P + c.T > CAPACITY)) continue;
    try {
      const g = new GraphBuilder();
      g.output('y', v.build(g), 'float32', ['B', 'T', HQ * D]);
      const session = await ort.InferenceSession.create(g.encode('attention', v.opset), { intraOpNumThreads: threads, graphOptimizationLevel: 'all' });
      seed = 3;
      const input = feeds(c, session.inputNames, v.shared);
      // Shared: the same past every run (the new slot is rewritten in place each time).
      const fetches = v.shared ? { y: null, present_k: input.past_k!, present_v: input.past_v! } : undefined;
      const times: number[] = [];
      let y: Float32Array | undefined;
      for (let r = 0; r < 6; r++) {
        const t = performance.now();
        const out = fetches ? await session.run(input, fetches) : await session.run(input);
        if (r > 0) times.push(performance.now() - t);
        y = out.y!.data as Float32Array;
      }
      reference ??= y;
      let diff = 0;
      for (let i = 0; i < y!.length; i++) diff = Math.max(diff, Math.abs(y![i]! - reference![i]!));
      times.sort((a, b) => a - b);
      console.log(`   ${v.name.padEnd(48)} ${times[2]!.toFixed(1).padStart(8)} ms   max |Δ| ${diff.toExponential(1)}`);
      await session.release();
    } catch (e) {
      console.log(`   ${v.name.padEnd(48)} refused: ${String((e as Error).message).split('\n')[0]!.slice(0, 140)}`);
    }
  }
}
