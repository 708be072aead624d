// The provider's fused kernels against the graph's own forms (#34: "use the provider's
// fused kernels where they are exact enough and faster — measure: its attention, rotary,
// norm kernels"), at the 360M shape of ../shared/gpu/README.md (hidden 960, 15 query / 5
// key-value heads of 64). For each form, one JSON line:
//   ms         time per op: a chain of 8 of them minus a chain of 1, over 7, so that
//              uploading the inputs and reading the output back is not counted (median
//              of 5 runs after a warm-up)
//   maxAbs     largest |Δ| of one op's output against the graph's form
//   differ     how many rows get other bits when the pass's shape changes (the contracts:
//              a row alone = the row among others, test/row-bits.ts; a decode step's rows
//              = the same rows of a full pass), out of `of`
// Nothing is asserted; a form is worth taking only with differ 0 (the bit contracts) and
// a lower ms on a GPU host. lavapipe's times are a CPU's, not a GPU's.
//   node bench/gpu-kernels.js [--device webgpu|cpu] [--shape 360m|tiny] [--batch 16] [--chain 8]
// (lavapipe: --batch 1 --chain 2, or the 360M attention over 16 × 512 takes an hour)
import { parseArgs } from 'node:util';
import ort from 'onnxruntime-node';
import { GraphBuilder, float } from '../src/graph/builder.js';
import type { ProviderKind } from '../src/common/providers.js';
import { rng } from '../src/common/random.js';
import { rowsThatDiffer } from '../test/row-bits.js';

// Not strict: bench/gpu-host.sh passes it bench/gpu.js's flags too (--shape is shared).
const { values: args } = parseArgs({
  strict: false,
  options: {
    device: { type: 'string', default: 'webgpu' },
    shape: { type: 'string', default: '360m' },
    batch: { type: 'string', default: '16' }, // rows of a scoring pass (of 512) and of a multi-stream decode step
    chain: { type: 'string', default: '8' },
  },
});
const target = String(args.device) as ProviderKind;
const SHAPES = { '360m': { hidden: 960, heads: 15, kv: 5, D: 64 }, tiny: { hidden: 64, heads: 4, kv: 2, D: 16 } };
const { hidden, heads: H, kv: KV, D } = SHAPES[String(args.shape) as keyof typeof SHAPES];
const G = H / KV;
const MAX_POSITIONS = 4096;
const CHAIN = Number(args.chain);
const BATCH = Number(args.batch);

type Feeds = Record<string, ort.Tensor>;
/** One op of a form: its input `x` (and the shared inputs it declares) → an output shaped as `x`. */
type Op = (g: GraphBuilder, x: string, inputs: Inputs) => string;
interface Inputs {
  get(name: string, dtype: 'float32' | 'int64' | 'int32', dims: (number | string)[]): string;
}
/** For a form that declares no inputs beside `x` (the norms). */
const noInputs: Inputs = {
  get: (name) => {
    throw new Error(`no input ${name} here`);
  },
};

async function session(op: Op, xDims: (number | string)[], length: number) {
  const g = new GraphBuilder(target);
  const declared = new Map<string, string>();
  const inputs: Inputs = { get: (name, dtype, dims) => declared.get(name) ?? declared.set(name, g.input(name, dtype, dims)).get(name)! };
  let x = g.input('x', 'float32', xDims);
  for (let i = 0; i < length; i++) x = g.scope(`op.${i}`, () => op(g, x, inputs));
  g.output('y', x, 'float32', xDims);
  const providers = target === 'webgpu' ? ['webgpu'] : ['cpu'];
  return ort.InferenceSession.create(g.encode('kernels', 21), { executionProviders: providers, graphOptimizationLevel: 'all' });
}

/** `feeds` less those `s` does not declare (forms differ in their inputs). */
const mine = (s: ort.InferenceSession, feeds: Feeds): Feeds => Object.fromEntries(s.inputNames.map((n) => [n, feeds[n]!]));

async function timed(s: ort.InferenceSession, all: Feeds): Promise<number> {
  const feeds = mine(s, all);
  await s.run(feeds);
  const times: number[] = [];
  for (let i = 0; i < 5; i++) {
    const t = performance.now();
    await s.run(feeds);
    times.push(performance.now() - t);
  }
  return times.sort((a, b) => a - b)[2]!;
}

async function once(op: Op, xDims: (number | string)[], feeds: Feeds): Promise<Float32Array> {
  const s = await session(op, xDims, 1);
  try {
    return (await s.run(mine(s, feeds))).y!.data as Float32Array;
  } finally {
    await s.release();
  }
}

/** ms per op of `op` on `feeds`: a chain of CHAIN minus a chain of one. */
async function msPerOp(op: Op, xDims: (number | string)[], feeds: Feeds): Promise<number> {
  const [one, many] = [await session(op, xDims, 1), await session(op, xDims, CHAIN)];
  try {
    return (await timed(many, feeds)) - (await timed(one, feeds));
  } finally {
    await one.release();
    await many.release();
  }
}

const maxAbs = (a: Float32Array, b: Float32Array) => a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i]!)), 0);
const random = (r: () => number, n: number, scale = 1) => Float32Array.from({ length: n }, () => (r() - 0.5) * 2 * scale);
const tensor = (data: Float32Array, dims: number[]) => new ort.Tensor('float32', data, dims);
const print = (line: Record<string, unknown>) => console.log(JSON.stringify({ device: target, shape: args.shape, ...line }));

// ── norms: [rows, hidden] ────────────────────────────────────────────────────────────
const weight = (g: GraphBuilder) => g.constant('float32', [hidden], Array.from({ length: hidden }, (_, i) => 0.5 + (i % 7) / 7));
const NORMS: Record<string, Op> = {
  //   x ─Pow─rowMean─Add(eps)─Sqrt─Div(x)─Mul(w)─►  (ops.ts)
  graph: (g, x) => {
    const rms = g.node('Sqrt', [g.node('Add', [g.rowMean(g.node('Pow', [x, g.scalar(2)]), hidden), g.scalar(1e-5)])]);
    return g.node('Mul', [g.node('Div', [x, rms]), weight(g)]);
  },
  SimplifiedLayerNormalization: (g, x) => g.node('SimplifiedLayerNormalization', [x, weight(g)], { attrs: { axis: -1, epsilon: float(1e-5) } }),
};

// ── rotary: x [B, H, T, D] as the decoder has it, rotate-half over all D ──────────────
const half = D / 2;
const angles = Array.from({ length: MAX_POSITIONS * half }, (_, i) => Math.fround(Math.floor(i / half) * Math.pow(10000, -(i % half) / half)));
const ROTARY: Record<string, Op> = {
  //   x·cos + Concat(−x₂, x₁)·sin, cos/sin [B,1,T,D] gathered once a pass (fed here) (decoder.ts applyRope)
  graph: (g, x, inputs) => {
    const [cos, sin] = ['cos', 'sin'].map((t) => inputs.get(t, 'float32', ['B', 1, 'T', D]));
    const [x1, x2] = g.nodeN('Split', 'halves', [x], { outputs: 2, attrs: { axis: -1, num_outputs: 2 } }) as [string, string];
    const rotated = g.node('Concat', [g.node('Neg', [x2]), x1], { attrs: { axis: -1 } });
    return g.node('Add', [g.node('Mul', [x, cos!]), g.node('Mul', [rotated, sin!])]);
  },
  RotaryEmbedding: (g, x, inputs) =>
    g.node(
      'RotaryEmbedding',
      [
        x,
        inputs.get('position_ids', 'int64', ['B', 'T']),
        g.constant('float32', [MAX_POSITIONS, half], angles.map(Math.cos)),
        g.constant('float32', [MAX_POSITIONS, half], angles.map(Math.sin)),
      ],
      { domain: 'com.microsoft', attrs: { num_heads: H, interleaved: 0 } },
    ),
};

// ── attention: q [B, T, H·D] after a past of P, keys and values [B, KV, P + T, D] ───
// The chain feeds each op's output as the next op's queries; keys and values are inputs.
const ATTENTION: Record<string, Op> = {
  //   q ─Reshape/Transpose─► [B,KV,G,T,D] ─MatMul(keysᵀ)·scale + bias─Softmax─MatMul(values)─► (decoder.ts)
  graph: (g, x, inputs) => {
    const [keys, values, bias] = attentionInputs(inputs);
    const q = g.node('Transpose', [g.node('Reshape', [x, g.ints([0, 0, KV, G, D])])], { attrs: { perm: [0, 2, 3, 1, 4] } });
    const kv5 = (t: string) => g.node('Unsqueeze', [t, g.ints([2])]);
    const scores = g.matMulT(q, kv5(keys), { name: 'scores', rank: 5, alpha: 1 / Math.sqrt(D) });
    const probs = g.node('Softmax', [g.node('Add', [scores, bias])], { attrs: { axis: -1 } });
    const ctx = g.node('Transpose', [g.node('MatMul', [probs, kv5(values)])], { attrs: { perm: [0, 3, 1, 2, 4] } });
    return g.node('Reshape', [ctx, g.ints([0, 0, H * D])]);
  },
  //   keys, values repeated to every query head [B,H,S,D]; bias [B,1,T,S]
  MultiHeadAttention: (g, x, inputs) => {
    const [keys, values, bias] = attentionInputs(inputs);
    const everyHead = (t: string) => g.node('Reshape', [g.node('Expand', [g.node('Unsqueeze', [t, g.ints([2])]), g.ints([1, 1, G, 1, 1])]), g.ints([0, H, -1, D])]);
    const bias4 = g.node('Squeeze', [bias, g.ints([1])]);
    return g.nodeN('MultiHeadAttention', 'mha', [x, everyHead(keys), everyHead(values), '', '', bias4], {
      domain: 'com.microsoft',
      outputs: 1,
      attrs: { num_heads: H, scale: float(1 / Math.sqrt(D)) },
    })[0]!;
  },
};

function attentionInputs(inputs: Inputs): [string, string, string] {
  return [
    inputs.get('keys', 'float32', ['B', KV, 'S', D]),
    inputs.get('values', 'float32', ['B', KV, 'S', D]),
    inputs.get('bias', 'float32', ['B', 1, 1, 'T', 'S']),
  ];
}

/** Causal attention feeds for B rows of T queries after P cached keys (all valid). */
function attentionFeeds(r: () => number, B: number, P: number, T: number, kv?: { keys: Float32Array; values: Float32Array; S: number }): Feeds {
  const S = P + T;
  const bias = new Float32Array(B * T * S);
  for (let b = 0; b < B; b++) for (let t = 0; t < T; t++) for (let j = 0; j < S; j++) bias[(b * T + t) * S + j] = j <= P + t ? 0 : -1e30;
  // Keys and values of a longer pass, cut to its first S slots (a decode step's view).
  const cut = (all: Float32Array | undefined, n: number) => {
    if (!all) return random(r, n);
    const out = new Float32Array(B * KV * S * D);
    for (let row = 0; row < B * KV; row++) out.set(all.subarray(row * kv!.S * D, row * kv!.S * D + S * D), row * S * D);
    return out;
  };
  return {
    x: tensor(random(r, B * T * H * D), [B, T, H * D]),
    keys: tensor(cut(kv?.keys, B * KV * S * D), [B, KV, S, D]),
    values: tensor(cut(kv?.values, B * KV * S * D), [B, KV, S, D]),
    bias: tensor(bias, [B, 1, 1, T, S]),
  };
}

console.error(`# ${target}: hidden ${hidden}, ${H}/${KV} heads of ${D}; chains of ${CHAIN}`);
const r = rng(7);

// Norms: a scoring pass's rows (batch × 512) and a decode step's (4); with the latter, 24 rows
// alone vs in one tensor.
for (const rows of [BATCH * 512, 4]) {
  const feeds = { x: tensor(random(r, rows * hidden, 3), [1, rows, hidden]) };
  const reference = await once(NORMS.graph!, [1, 'T', hidden], feeds);
  for (const [form, op] of Object.entries(NORMS)) {
    const differ = rows === 4 ? await rowsThatDiffer((g, x) => op(g, x, noInputs), hidden, 24, 1, target) : undefined;
    const maxAbsDelta = maxAbs(await once(op, [1, 'T', hidden], feeds), reference);
    print({ kernel: 'norm', form, rows, ms: await msPerOp(op, [1, 'T', hidden], feeds), maxAbs: maxAbsDelta, ...(differ === undefined ? {} : { differ, of: 24 }) });
  }
}

// Rotary: batch × 512 and a decode step (1 × 4).
for (const [B, T] of [
  [BATCH, 512],
  [1, 4],
]) {
  const position = (i: number) => 100 + (i % T!);
  const table = (f: (a: number) => number) => {
    const out = new Float32Array(B! * T! * D);
    for (let i = 0; i < B! * T!; i++) for (let d = 0; d < D; d++) out[i * D + d] = f(angles[position(i) * half + (d % half)]!);
    return tensor(out, [B!, 1, T!, D]);
  };
  const dims = ['B', H, 'T', D];
  const feeds = {
    x: tensor(random(r, B! * H * T! * D), [B!, H, T!, D]),
    position_ids: new ort.Tensor('int64', BigInt64Array.from({ length: B! * T! }, (_, i) => BigInt(position(i))), [B!, T!]),
    cos: table(Math.cos),
    sin: table(Math.sin),
  };
  const reference = await once(ROTARY.graph!, dims, feeds);
  for (const [form, op] of Object.entries(ROTARY)) {
    print({ kernel: 'rotary', form, rows: B! * T!, ms: await msPerOp(op, dims, feeds), maxAbs: maxAbs(await once(op, dims, feeds), reference) });
  }
}

// Attention: scoring (batch × 512), a decode step of 1 and of batch streams after 1024; and
// decode = score: the last 4 rows of a 1028-token pass against a 4-row step after 1024.
for (const [B, P, T] of [
  [BATCH, 0, 512],
  [1, 1024, 4],
  [BATCH, 1024, 4],
]) {
  const feeds = attentionFeeds(r, B!, P!, T!);
  const reference = await once(ATTENTION.graph!, ['B', 'T', H * D], feeds);
  for (const [form, op] of Object.entries(ATTENTION)) {
    let line: Record<string, unknown> = { kernel: 'attention', form, batch: B, past: P, tokens: T };
    try {
      line = { ...line, ms: await msPerOp(op, ['B', 'T', H * D], feeds), maxAbs: maxAbs(await once(op, ['B', 'T', H * D], feeds), reference) };
      if (P === 1024 && B === 1) {
        const full = attentionFeeds(rng(3), 1, 0, 1028);
        const step = attentionFeeds(rng(4), 1, 1024, 4, { keys: full.keys!.data as Float32Array, values: full.values!.data as Float32Array, S: 1028 });
        step.x = tensor((full.x!.data as Float32Array).slice(1024 * H * D), [1, 4, H * D]);
        const [whole, part] = [await once(op, ['B', 'T', H * D], full), await once(op, ['B', 'T', H * D], step)];
        const tail = whole.subarray(1024 * H * D);
        line.differ = [0, 1, 2, 3].filter((t) => part.subarray(t * H * D, (t + 1) * H * D).some((v, j) => v !== tail[t * H * D + j])).length;
        line.of = 4;
      }
    } catch (e) {
      line.refused = String((e as Error).message).split('\n')[0]!.slice(0, 160);
    }
    print(line);
  }
}
