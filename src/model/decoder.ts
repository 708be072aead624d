// The scoring graph of a decoder-only causal LM, built from a Hugging Face checkpoint.
//
// Read it top to bottom like nanoGPT: embeddings, then each decoder layer (norm →
// attention → residual → norm → MLP → residual), then the final norm and the output
// projection on the scored positions only, then the log-prob kernel. Family
// differences come from `config.spec` (families.ts), never from copied code. A tap
// (kernels/probe-tap.ts) may watch the attention probabilities through three hooks.
//
// Inputs (B rows of T new tokens, S = P + T key slots, N scored positions):
//   input_ids     [B, T] int64
//   position_ids  [B, T] int64    absolute position of each new token
//   key_positions [B, S] int64    position of each key slot, -1 = masked: a row's past, then
//                                 its new tokens, then padding (slot = position)
//   past.L.key / past.L.value  [B', kv_heads, P₀, head_dim]  each row's past (may be empty;
//                                 B' = B, or fewer rows that the pass's rows share)
//   recent.L.key / recent.L.value [B', kv_heads, P₁, head_dim]  the rest of it (may be empty):
//                                 a row's past is the first past_lengths[b] slots of the
//                                 two end to end (P = P₀ + P₁), padding after them. A long
//                                 past kept whole goes in as it lies and the few tokens
//                                 since as `recent`, so a decode step copies no past outside
//                                 the graph (session.ts)
//   past_lengths  [B]    int64    valid slots of each row's past: its new slots follow them
//   past_rows     [B]    int64    the row of past/recent each row continues, read when the
//                                 past has fewer rows than the pass (rows sharing a past:
//                                 continuations of one context); else row b is row b
//   score_rows    [N]    int64    flat index b·T + t of each scored position
//   target_ids    [N]    int64    the token each scored position should predict
//   top_k         [1]    int64
//   next_rows     [M]    int64    scored positions whose whole distribution is fetched (generation)
//   shape_salt    [h]    bool     unread; its length is a hash of the pass's shapes (session-host.ts)
// On WebGPU the index feeds (ids, positions, rows) are int32 pieces of one input,
// `index_feeds`, with `size.<dim>` inputs for the dims the host side reads
// (graph/index-feeds.ts); past_lengths and past_rows give way to kv_rows [B, 4] and
// kv_steps [4], where each key slot's K/V lies (past.ts: keySources); and full_slots [1]
// int64 asks for each layer's keys and values whole (full.L.*).
// Outputs: logprobs [N], greedy [N], topk_logprobs [N, k], topk_ids [N, k], next_logprobs [M, vocab],
//   new.L.key / new.L.value [B, kv_heads, T, head_dim]: the new tokens' KV only. The past
//   is already where the caller keeps it; returning it again cost a copy of the whole
//   past per pass (measured at a 1900-token past, batch 1: 46 → 30 ms a pass).
import { GraphBuilder, type ExternalTensor, type GraphTarget } from '../graph/builder.js';
import type { IndexFeedPlan } from '../graph/index-feeds.js';
import { kvDType, type ComputeDType } from '../common/dtypes.js';
import type { MlpSpec, ModelConfig, RopeSpec } from './families.js';
import { logprobKernel } from '../../kernels/logprobs.js';
import { ModelOps, unreachable } from './ops.js';
import { pastInputs, placeKv, type Past } from './past.js';

export { unreachable };

/** Where the decoder gets its weights: a checkpoint, or a recorder (synthetic.ts). */
export interface WeightSource {
  /** The folder external initializers are resolved against. */
  readonly weightsDir: string;
  get(name: string, shape: number[]): ExternalTensor;
  has(name: string): boolean;
}

/** Hooks through which a tap watches the decoder without living in it. */
export interface DecoderTap {
  /** Once, before the first layer: declare inputs; `allowed` is the [B,T,S] bool mask. */
  begin(g: GraphBuilder, model: TapModel): void;
  /** Layer `layer`'s attention probabilities, float32 [B, kv_heads, group, T, S]. */
  attentionProbs(layer: number, probs: string): void;
  /** After a layer: the hidden state the next layer reads (the tap may order itself first). */
  afterLayer(layer: number, hidden: string): string;
  /** After the last layer: the tap's outputs. */
  end(): void;
}

export interface TapModel {
  config: ModelConfig;
  allowed: string;
  /** A float32 value in the compute dtype. */
  toCompute(x: string): string;
}

export interface DecoderGraph {
  model: Uint8Array;
  weightsDir: string;
  nodeCount: number;
  /** WebGPU: the feeds that travel in `index_feeds` (empty elsewhere). */
  indexFeeds: IndexFeedPlan;
}

export function buildDecoderGraph(
  config: ModelConfig,
  weights: WeightSource,
  dtype: ComputeDType = 'float32',
  tap?: DecoderTap,
  target: GraphTarget = 'cpu',
): DecoderGraph {
  const b = new DecoderBuilder(config, weights, dtype, tap, target);
  b.build();
  const model = b.g.encode(`ctxprobe/${config.modelType}`);
  return { model, weightsDir: weights.weightsDir, nodeCount: b.g.nodeCount, indexFeeds: b.g.indexFeedPlan };
}

/** The residual stream between layers: its value, or (WebGPU, float32) its two terms not
 * yet added, which the next norm adds as it norms (`skipNorm`). */
type Residual = { kind: 'sum'; sum: string } | { kind: 'pending'; base: string; delta: string };

/** A layer's attention heads: q [B,kv,G,T,D], k and v [B,kv,T,D]; `scaled` when q already
 * carries the attention's scale. */
interface Heads {
  q: string;
  k: string;
  v: string;
  scaled: boolean;
}

/** How q and k are rotated: by explicit ops over cos/sin rows gathered once a pass (CPU,
 * CUDA), or, on WebGPU, by the provider's RotaryEmbedding kernel over the same tables:
 * one node instead of six per tensor, the same bits on lavapipe, and 6.9 against 24.1 ms
 * for 512 tokens of the 360M shape there (bench/gpu-kernels.ts). */
type Rope =
  | { kind: 'tables'; cos: string; sin: string; rotaryDim: number } // [B,1,T,R] each
  | { kind: 'fused'; positions: string; cosCache: string; sinCache: string; rotaryDim: number }; // rows [B,T] of the caches [rows, R/2]

class DecoderBuilder extends ModelOps {
  private readonly maskValue: number;
  /** Residual adds and the norms after them as one node each (decoderLayer). */
  private readonly fuseNorms: boolean;

  constructor(
    c: ModelConfig,
    source: WeightSource,
    dt: ComputeDType,
    private readonly tap?: DecoderTap,
    target: GraphTarget = 'cpu',
  ) {
    super(c, source, dt, target);
    // Finite, so fully masked (padding) rows never produce NaN that 0·NaN could spread.
    this.maskValue = dt === 'float32' ? -1e30 : -1e4;
    this.fuseNorms = target === 'webgpu' && dt === 'float32';
  }

  build(): void {
    const { g, c } = this;
    // Index feeds are int64, or on WebGPU int32 pieces of one upload (index-feeds.ts).
    const inputIds = g.indexInput('input_ids', ['batch', 'seq']);
    const positionIds = g.indexInput('position_ids', ['batch', 'seq']);
    const keyPositions = g.indexInput('key_positions', ['batch', 'total']);
    g.input('shape_salt', 'bool', ['salt']);
    // CPU and CUDA lay keys out by Ifs over past_lengths and past_rows; WebGPU by a Gather
    // of rows whose sources the session thread describes (past.ts: kv_rows, kv_steps).
    const branchFeeds =
      g.target === 'webgpu'
        ? undefined
        : { inputIds, keyPositions, pastLengths: g.input('past_lengths', 'int64', ['batch']), pastRows: g.input('past_rows', 'int64', ['batch']) };
    // WebGPU: how many key slots of each layer's keys and values to return whole (`full.L.*`,
    // the next decode step's past as it lies); 0 returns none.
    const fullSlots = g.target === 'webgpu' ? g.input('full_slots', 'int64', [1]) : undefined;

    let x = g.scope('model', () => this.embed(inputIds, positionIds));
    const mask = g.scope('model/attn_mask', () => this.attentionMask(positionIds, keyPositions));
    // longrope: each row's whole-sequence length picks its frequencies.
    const sequenceLengths = c.rope?.long ? g.indexInput('sequence_lengths', ['batch']) : undefined;
    const rope = c.rope ? g.scope('model/rotary', () => this.rotaryTables(positionIds, c.rope!, '/model/rotary', sequenceLengths)) : undefined;
    // Gemma 3: the sliding layers rotate with their own frequencies.
    const localRope = c.localRope ? g.scope('model/rotary_local', () => this.rotaryTables(positionIds, c.localRope!, '/model/rotary_local')) : rope;
    if (this.tap) g.scope('model', () => this.tap!.begin(g, { config: c, allowed: mask.allowed, toCompute: (v) => this.fromFloat32(v) }));
    const kvType = kvDType(this.dt);
    const pastOf = pastInputs(g, c, this.dt, branchFeeds);

    let stream: Residual = { kind: 'sum', sum: x };
    for (let i = 0; i < c.numLayers; i++) {
      const past = pastOf(i);
      const layer = g.scope(`model/layers.${i}`, () => this.decoderLayer(i, stream, mask.biases[i]!, c.slidingLayers[i] ? localRope : rope, past));
      stream = layer.hidden;
      if (this.tap && layer.hidden.kind === 'sum') {
        const hidden = layer.hidden.sum;
        stream = { kind: 'sum', sum: g.scope(`model/layers.${i}`, () => this.tap!.afterLayer(i, hidden)) };
      }
      g.output(`new.${i}.key`, layer.newKey, kvType, ['batch', c.numKvHeads, 'seq', c.headDim]);
      g.output(`new.${i}.value`, layer.newValue, kvType, ['batch', c.numKvHeads, 'seq', c.headDim]);
      if (fullSlots) {
        g.scope(`model/layers.${i}/attn`, () => {
          const whole = (t: string, name: string) => this.kvOut(g.node('Slice', [t, g.ints([0]), fullSlots, g.ints([2])], { name }));
          g.output(`full.${i}.key`, whole(layer.keys, 'full_keys'), kvType, ['batch', c.numKvHeads, 'full', c.headDim]);
          g.output(`full.${i}.value`, whole(layer.values, 'full_values'), kvType, ['batch', c.numKvHeads, 'full', c.headDim]);
        });
      }
    }
    // A tap's statistics come beside the log-probs: one pass answers both.
    if (this.tap) g.scope('model', () => this.tap!.end());
    const last = stream;
    x = last.kind === 'sum' ? last.sum : g.scope(`model/layers.${c.numLayers - 1}`, () => g.node('Add', [last.base, last.delta], { name: 'mlp_residual' }));

    const scoreRows = g.indexInput('score_rows', ['scored']);
    const targetIds = g.indexInput('target_ids', ['scored']);
    const topK = g.input('top_k', 'int64', [1]);
    const nextRows = g.indexInput('next_rows', ['next']);
    const k = g.scope('model', () => logprobKernel(g, this.head(x, scoreRows), c.vocabSize, targetIds, topK, nextRows));
    g.output('logprobs', k.logprobs, 'float32', ['scored']);
    g.output('greedy', k.greedy, 'bool', ['scored']);
    g.output('topk_logprobs', k.topkLogprobs, 'float32', ['scored', 'k']);
    g.output('topk_ids', k.topkIds, 'int64', ['scored', 'k']);
    g.output('next_logprobs', k.nextLogprobs, 'float32', ['next', c.vocabSize]);
    if (k.top1) {
      g.output('top1_ids', k.top1.ids, 'int64', ['scored']);
      g.output('top1_logprobs', k.top1.logprobs, 'float32', ['scored']);
    }
  }

  // input_ids ──Gather(embed)──► x ──(+ Gather(wpe, position_ids) for learned positions)
  private embed(inputIds: string, positionIds: string): string {
    const { g, c } = this;
    const table = this.weight(this.spec.embed, [c.vocabSize, c.hiddenSize]);
    const x = this.scaleEmbeddings(g.node('Gather', [table, inputIds], { name: 'embed_tokens', attrs: { axis: 0 } }));
    const positions = this.spec.positions;
    switch (positions.kind) {
      case 'rope':
        return x; // applied to q and k in every layer
      case 'learned': {
        const wpe = this.weight(positions.table, [c.maxPositions, c.hiddenSize]);
        const pos = g.node('Gather', [wpe, positionIds], { name: 'embed_positions', attrs: { axis: 0 } });
        return g.node('Add', [x, pos], { name: 'embed_sum' });
      }
      default:
        return unreachable(positions);
    }
  }

  // Gemma: embeddings × √hidden, the factor rounded to the compute dtype as transformers
  // does (`torch.tensor(hidden ** 0.5, dtype=…)`).
  private scaleEmbeddings(x: string): string {
    const { g, c } = this;
    switch (this.spec.embedScale) {
      case 'none':
        return x;
      case 'sqrtHidden':
        return g.node('Mul', [x, this.fromFloat32(g.scalar(Math.sqrt(c.hiddenSize)))], { name: 'embed_scale' });
      default:
        return unreachable(this.spec.embedScale);
    }
  }

  // Additive masks from positions (so left/right padding and a shared past all follow the
  // same rule); a layer with the sliding window uses the windowed one:
  //   key_positions [B,S] ─Unsqueeze─► [B,1,S] ─┬─ LessOrEqual(q) ──┐
  //   position_ids  [B,T] ─Unsqueeze─► [B,T,1] ─┘  GreaterOrEqual(0)─And─► allowed ─Where(0, -big)─► [B,1,1,T,S]
  //                                               Sub(q, k) < window ─And(allowed)─► windowed ─Where─► [B,1,1,T,S]
  // `allowed` for a tap: the windowed mask when every layer slides, else the causal one.
  private attentionMask(positionIds: string, keyPositions: string): { biases: string[]; allowed: string } {
    const { g, c } = this;
    const q = g.node('Unsqueeze', [positionIds, g.ints([2])], { name: 'query_positions' });
    const k = g.node('Unsqueeze', [keyPositions, g.ints([1])], { name: 'key_positions' });
    const causal = g.node('LessOrEqual', [k, q], { name: 'causal' });
    const valid = g.node('GreaterOrEqual', [k, g.index(0)], { name: 'valid_keys' });
    const allowed = g.node('And', [causal, valid], { name: 'allowed' });
    const bias = (mask: string, name: string) =>
      g.node('Unsqueeze', [g.node('Where', [mask, g.scalar(0), g.scalar(this.maskValue)], { name }), g.ints([1, 2])], {
        name: `${name}_5d`,
      });
    const sliding = c.slidingLayers;
    let windowed: string | undefined;
    if (c.slidingWindow !== undefined && sliding.some(Boolean)) {
      const distance = g.node('Sub', [q, k], { name: 'distance' });
      const inWindow = g.node('Less', [distance, g.index(c.slidingWindow)], { name: 'in_window' });
      windowed = g.node('And', [allowed, inWindow], { name: 'allowed_in_window' });
    }
    const full = sliding.every(Boolean) ? undefined : bias(allowed, 'bias');
    const window = windowed ? bias(windowed, 'window_bias') : undefined;
    return {
      biases: sliding.map((slides) => (slides ? window! : full!)),
      allowed: windowed && sliding.every(Boolean) ? windowed : allowed,
    };
  }

  // cos/sin for every new token, shared by all layers (transformers' rotate-half form, R
  // rotary dimensions), looked up by position in tables made here: onnxruntime's Cos/Sin
  // round an element differently depending on where it sits in the tensor (measured: 1
  // in 1000 angles moved by an ulp when the tensor shifted by 3), so computing them in the
  // graph would make a token's rotation depend on its batch.
  //   position_ids (+ P when the row is long: longrope) ─Gather(cos table, sin table)─► [B,T,R/2] ─Concat(x2)─► [B,1,T,R]
  //   WebGPU: the rows and the tables themselves, for RotaryEmbedding in each layer (Rope)
  private rotaryTables(positionIds: string, rope: RopeSpec, name: string, sequenceLengths?: string): Rope {
    const { g, c } = this;
    const P = c.maxPositions;
    const variants = rope.long && sequenceLengths ? [rope.invFreq, rope.long.invFreq] : [rope.invFreq];
    const { cos: cosTable, sin: sinTable } = rotaryValues(variants, P, rope.attentionFactor);
    const half = rope.invFreq.length;
    const cosT = g.namedConstant(`${name}/cos`, 'float32', [variants.length * P, half], cosTable);
    const sinT = g.namedConstant(`${name}/sin`, 'float32', [variants.length * P, half], sinTable);
    let index = positionIds;
    if (variants.length > 1) {
      // Where, not Cast·P: WebGPU has a Cast to int64, and its result read back by the CPU's
      // Add was a wait for the device.
      const isLong = g.node('Greater', [sequenceLengths!, g.index(rope.long!.originalMax)], { name: 'is_long' });
      const offset = g.node('Unsqueeze', [g.node('Where', [isLong, g.index(P), g.index(0)], { name: 'table_offset' }), g.ints([1])], { name: 'table_offset_2d' });
      index = g.node('Add', [positionIds, offset], { name: 'table_rows' });
    }
    if (g.target === 'webgpu') {
      // RotaryEmbedding takes int64 positions: cast once on the device for every layer.
      const positions = g.cast(index, 'int64', g.indexType, 'positions_int64');
      return { kind: 'fused', positions, cosCache: this.fromFloat32(cosT), sinCache: this.fromFloat32(sinT), rotaryDim: rope.rotaryDim };
    }
    const table = (t: string, what: string) => {
      const half = g.node('Gather', [t, index], { name: `${what}_half`, attrs: { axis: 0 } });
      const full = g.node('Concat', [half, half], { name: `${what}_full`, attrs: { axis: -1 } });
      return g.node('Unsqueeze', [this.fromFloat32(full), g.ints([1])], { name: `${what}_4d` });
    };
    return { kind: 'tables', cos: table(cosT, 'cos'), sin: table(sinT, 'sin'), rotaryDim: rope.rotaryDim };
  }

  //   x ─► (attn_in norm) ─► attention ─► (attn_out norm) ─► + ─► (mlp_in norm) ─► mlp ─► (mlp_out norm) ─► + ─► hidden
  //   └──────────────────────────────────────────────────────┘ └─────────────────────────────────────────┘
  // On WebGPU in float32 each residual + and the norm after it are one node (skipNorm): the
  // layer's own, and across layers (hidden left as its two terms for the next layer's
  // attn_in norm) unless a tap reads the hidden state.
  private decoderLayer(i: number, x: Residual, bias: string, rope: Rope | undefined, past: Past) {
    const { g, c } = this;
    const prefix = this.spec.layerPrefix(i);
    const norms = this.spec.norms;
    const maybeNorm = (role: keyof Omit<typeof norms, 'q' | 'k'>, v: string) => {
      const name = norms[role];
      return name ? g.scope(`${role}_norm`, () => this.norm(v, prefix + name, c.hiddenSize)) : v;
    };
    // A residual's sum and the norm of `role` over it: one node where both are pending.
    const addNorm = (role: 'attnIn' | 'mlpIn', r: Residual, addName: string): { sum: string; normed: string } => {
      if (r.kind === 'sum') return { sum: r.sum, normed: maybeNorm(role, r.sum) };
      const name = norms[role];
      if (name) return g.scope(`${role}_norm`, () => this.skipNorm(r.base, r.delta, prefix + name, c.hiddenSize));
      const sum = g.node('Add', [r.base, r.delta], { name: addName });
      return { sum, normed: sum };
    };
    // (the attn_in norm is named inside the attention's scope, as it always was)
    let input = { sum: '', normed: '' };
    const attn = g.scope('attn', () => {
      input = addNorm('attnIn', x, 'residual_in');
      return this.attention(prefix, input.normed, bias, rope, past, i);
    });
    const attnDelta = maybeNorm('attnOut', attn.out);
    const residual: Residual = this.fuseNorms
      ? { kind: 'pending', base: input.sum, delta: attnDelta }
      : { kind: 'sum', sum: g.node('Add', [input.sum, attnDelta], { name: 'attn_residual' }) };
    let afterAttn = { sum: '', normed: '' };
    const mlp = g.scope('mlp', () => {
      afterAttn = addNorm('mlpIn', residual, 'attn_residual');
      return this.mlp(prefix, afterAttn.normed, i);
    });
    const mlpDelta = maybeNorm('mlpOut', mlp);
    const hidden: Residual =
      this.fuseNorms && !this.tap
        ? { kind: 'pending', base: afterAttn.sum, delta: mlpDelta }
        : { kind: 'sum', sum: g.node('Add', [afterAttn.sum, mlpDelta], { name: 'mlp_residual' }) };
    return { hidden, newKey: this.kvOut(attn.newKey), newValue: this.kvOut(attn.newValue), keys: attn.keys, values: attn.values };
  }

  // Grouped-query attention without repeating K/V: queries are laid out
  // [B, kv_heads, group, T, D] and K/V [B, kv_heads, 1, S, D], so MatMul broadcasts.
  //   h ─► q, k, v projections (qk norms) ─Reshape/Transpose─► q [B,kv,G,T,D], k/v [B,kv,T,D] ─rope(q, k)
  //   k, v ─placeKv(each row's past, then its new slots)─► keys, values ─Unsqueeze─► FusedMatMul(q,kᵀ,·scale) ─(softcap)─ + bias ─► Softmax ─► probs
  //   k, v (the new slots) ─► new.L.key / new.L.value
  //   probs ─MatMul(v)─► [B,T,H·D] ─► o_proj
  private attention(prefix: string, h: string, bias: string, rope: Rope | undefined, past: Past, layer: number) {
    const { g, c } = this;
    const D = c.headDim;
    const { q: qNorm, k: kNorm } = this.spec.norms;
    // WebGPU, q/k norms per head or none: one product, q and k rotated as one tensor
    // (heads below).
    const perHead = qNorm?.over === 'head' && kNorm?.over === 'head' && this.spec.norm !== 'layer';
    const heads =
      g.target === 'webgpu' && rope?.kind === 'fused' && ((!qNorm && !kNorm) || perHead)
        ? this.jointHeads(prefix, h, rope, perHead ? { q: qNorm.name, k: kNorm.name } : undefined)
        : this.separateHeads(prefix, h, rope);
    const { q, k, v, scaled } = heads;
    // Each row's past, then its new slots, then padding (past.ts: how, and why).
    const dims = [{ dtype: this.dt, dims: ['batch', c.numKvHeads, 'total', D] }];
    const allKeys = placeKv(g, past, past.key.map((t) => this.kvIn(t)), k, 'keys', dims);
    const allValues = placeKv(g, past, past.value.map((t) => this.kvIn(t)), v, 'values', dims);
    const keys = g.node('Unsqueeze', [allKeys, g.ints([2])], { name: 'keys_5d' });
    const values = g.node('Unsqueeze', [allValues, g.ints([2])], { name: 'values_5d' });
    const scores = g.matMulT(q, keys, { name: 'scores', rank: 5, alpha: scaled ? 1 : c.attentionScale, dtype: this.dt === 'float16' ? 'float16' : 'float32' });
    const capped = this.softcap(this.toFloat32(scores), c.attentionSoftcap, 'scores_softcap');
    const masked = g.node('Add', [capped, bias], { name: 'masked_scores' });
    const probs32 = g.node('Softmax', [masked], { name: 'probs', attrs: { axis: -1 } });
    this.tap?.attentionProbs(layer, probs32);
    let ctx = g.node('MatMul', [this.fromFloat32(probs32), values], { name: 'context' });
    ctx = g.node('Transpose', [ctx], { name: 'context_layout', attrs: { perm: [0, 3, 1, 2, 4] } });
    ctx = g.node('Reshape', [ctx, g.ints([0, 0, c.numHeads * D])], { name: 'merge_heads' });
    const out = this.linear(prefix + this.spec.o, ctx, c.numHeads * D, c.hiddenSize, c.bias.o, 'o_proj');
    return { out, newKey: k, newValue: v, keys: allKeys, values: allValues };
  }

  // q [B,kv,G,T,D], k and v [B,kv,T,D], each projected, normed and rotated on its own.
  private separateHeads(prefix: string, h: string, rope: Rope | undefined): Heads {
    const { g, c } = this;
    const D = c.headDim;
    const kv = c.numKvHeads;
    const group = c.numHeads / kv;
    let { q, k, v } = this.qkvProjections(prefix, h);
    const { q: qNorm, k: kNorm } = this.spec.norms;
    if (qNorm?.over === 'projection') q = g.scope('q_norm', () => this.norm(q, prefix + qNorm.name, c.numHeads * D));
    if (kNorm?.over === 'projection') k = g.scope('k_norm', () => this.norm(k, prefix + kNorm.name, kv * D));
    // The provider's RotaryEmbedding takes [B, T, heads·D] as it comes from the projection:
    // rotated there, q needs no 4-D view of its own (two nodes a layer fewer). Per-head
    // norms come first, on the heads.
    const rotateProjections = rope?.kind === 'fused' && qNorm?.over !== 'head' && kNorm?.over !== 'head';
    if (rope && rotateProjections) {
      q = g.scope('q_rope', () => this.applyRope(q, rope, { rank: 3, heads: c.numHeads }));
      k = g.scope('k_rope', () => this.applyRope(k, rope, { rank: 3, heads: kv }));
    }
    q = g.node('Reshape', [q, g.ints([0, 0, kv, group, D])], { name: 'q_heads' });
    k = g.node('Reshape', [k, g.ints([0, 0, kv, D])], { name: 'k_heads' });
    v = g.node('Reshape', [v, g.ints([0, 0, kv, D])], { name: 'v_heads' });
    if (qNorm?.over === 'head') q = g.scope('q_norm', () => this.norm(q, prefix + qNorm.name, D));
    if (kNorm?.over === 'head') k = g.scope('k_norm', () => this.norm(k, prefix + kNorm.name, D));
    q = g.node('Transpose', [q], { name: 'q_layout', attrs: { perm: [0, 2, 3, 1, 4] } });
    k = g.node('Transpose', [k], { name: 'k_layout', attrs: { perm: [0, 2, 1, 3] } });
    v = g.node('Transpose', [v], { name: 'v_layout', attrs: { perm: [0, 2, 1, 3] } });
    if (rope && !rotateProjections) {
      const qRope: Rope =
        rope.kind === 'tables'
          ? {
              ...rope,
              cos: g.node('Unsqueeze', [rope.cos, g.ints([1])], { name: 'cos_5d' }),
              sin: g.node('Unsqueeze', [rope.sin, g.ints([1])], { name: 'sin_5d' }),
            }
          : rope;
      q = g.scope('q_rope', () => this.applyRope(q, qRope, { rank: 5 }));
      k = g.scope('k_rope', () => this.applyRope(k, rope, { rank: 4, heads: kv }));
    }
    return { q, k, v, scaled: false };
  }

  // WebGPU, q/k norms per head or none: the same heads from one product, laid out by one
  // Transpose, q and k normed (per head) and rotated as one tensor of heads + kv_heads
  // heads, and the attention's scale in W_q, or with norms in their weights (rotation is
  // linear; a power of two, 1/8 at head_dim 64, scales exactly). RotaryEmbedding takes the
  // heads laid out [B, heads, T, D] as it takes [B, T, heads·D] (same bits). Without norms
  // five dispatches where separate products, rotations, layouts and the scores' scale
  // were nine; with them seven where there were eleven (the host pays about 18 µs a
  // dispatch on the H100). Bits are not the CPU graph's (a wider product), as before.
  //   h ─MatMul(W_q·scale ‖ W_k ‖ W_v)─Reshape─Transpose─► [B,H+2kv,T,D] ─Split─► qk [B,H+kv,T,D], v [B,kv,T,D]
  //   qk (─RMSNorm(D, unit weight)─Mul(qk norm weights [H+kv,1,D], q's·scale)) ─RotaryEmbedding─Split─► q ─Reshape─► [B,kv,G,T,D]; k
  private jointHeads(prefix: string, h: string, rope: Rope & { kind: 'fused' }, norms?: { q: string; k: string }): Heads {
    const { g, c } = this;
    const D = c.headDim;
    const [H, kv] = [c.numHeads, c.numKvHeads];
    const qkv = this.qkvProduct(prefix, h, norms ? 1 : c.attentionScale);
    const heads = g.node('Transpose', [g.node('Reshape', [qkv, g.ints([0, 0, H + 2 * kv, D])], { name: 'qkv_heads' })], {
      name: 'qkv_layout',
      attrs: { perm: [0, 2, 1, 3] },
    });
    let [qk, v] = g.nodeN('Split', 'qk_v_split', [heads, g.ints([H + kv, kv])], { outputs: 2, attrs: { axis: 1 } }) as [string, string];
    if (norms) qk = g.scope('qk_norm', () => this.headNorms(qk, prefix, norms, c.attentionScale));
    const rotated = g.scope('qk_rope', () => this.applyRope(qk, rope, { rank: 4, heads: H + kv }));
    const [qHeads, k] = g.nodeN('Split', 'q_k_split', [rotated, g.ints([H, kv])], { outputs: 2, attrs: { axis: 1 } }) as [string, string];
    const q = g.node('Reshape', [qHeads, g.ints([0, kv, H / kv, -1, D])], { name: 'q_groups' });
    return { q, k, v, scaled: true };
  }

  // The q and k heads' RMS norms over head_dim at once, q's weight times `qScale`:
  //   qk [B,H+kv,T,D] ─RMSNorm(unit weight)─Mul(w)─►, w = Concat(Expand(w_q·qScale, [H,1,D]), Expand(w_k, [kv,1,D]))
  // (w is made of initializers, which onnxruntime folds at load; Gemma's 1 + w likewise).
  private headNorms(qk: string, prefix: string, norms: { q: string; k: string }, qScale: number): string {
    const { g, c } = this;
    const D = c.headDim;
    const weight = (name: string, heads: number, scale: number, what: string) => {
      let w = this.rmsScale(this.weight(`${prefix}${name}.weight`, [D], 'float32'), `${what}_one_plus_weight`);
      if (scale !== 1) w = g.node('Mul', [w, g.scalar(scale)], { name: `${what}_scaled_weight` });
      return g.node('Expand', [g.node('Reshape', [w, g.ints([1, 1, D])], { name: `${what}_weight_3d` }), g.ints([heads, 1, D])], { name: `${what}_weights` });
    };
    const w = g.node('Concat', [weight(norms.q, c.numHeads, qScale, 'q'), weight(norms.k, c.numKvHeads, 1, 'k')], { name: 'weights', attrs: { axis: 0 } });
    const unit = g.constant('float32', [D], new Array<number>(D).fill(1));
    const normed = g.rmsNorm(this.toFloat32(qk), () => unit, D, c.normEps, 'several');
    return this.fromFloat32(g.node('Mul', [normed, w], { name: 'weighted' }));
  }

  // h ─► [B, T, (H + 2·kv)·D], its q columns scaled by `qScale`: one product against the
  // weights joined in the graph, which onnxruntime folds at load as it folds the weights'
  // Transposes (the fused projection's weight split into q and k‖v to scale q):
  //   W_q ─Mul(qScale)─┐
  //   W_k ‖ W_v ───────Concat─► W ─► h·Wᵀ (+ b, joined alike)
  private qkvProduct(prefix: string, h: string, qScale: number): string {
    const { g, c } = this;
    const qkv = this.spec.qkv;
    const [qSize, kvSize] = [c.numHeads * c.headDim, c.numKvHeads * c.headDim];
    const layout = this.spec.linearLayout;
    // A weight's output features are its rows (out_in) or its columns (in_out); a bias's are it.
    const shapeOf = (what: 'weight' | 'bias', size: number) =>
      what === 'bias' ? [size] : layout === 'out_in' ? [size, c.hiddenSize] : [c.hiddenSize, size];
    const axisOf = (what: 'weight' | 'bias') => (what === 'bias' || layout === 'out_in' ? 0 : 1);
    const joined = (what: 'weight' | 'bias') => {
      const axis = axisOf(what);
      let q: string;
      let kv: string;
      switch (qkv.kind) {
        case 'fused':
          [q, kv] = g.nodeN('Split', `split_${what}`, [this.weight(`${prefix}${qkv.qkv}.${what}`, shapeOf(what, qSize + 2 * kvSize)), g.ints([qSize, 2 * kvSize])], {
            outputs: 2,
            attrs: { axis },
          }) as [string, string];
          break;
        case 'separate':
          q = this.weight(`${prefix}${qkv.q}.${what}`, shapeOf(what, qSize));
          kv = g.node('Concat', [this.weight(`${prefix}${qkv.k}.${what}`, shapeOf(what, kvSize)), this.weight(`${prefix}${qkv.v}.${what}`, shapeOf(what, kvSize))], {
            name: `kv_${what}`,
            attrs: { axis },
          });
          break;
        default:
          return unreachable(qkv);
      }
      const scaled = qScale === 1 ? q : g.node('Mul', [q, this.fromFloat32(g.scalar(qScale))], { name: `scaled_q_${what}` });
      return g.node('Concat', [scaled, kv], { name: `joined_${what}`, attrs: { axis } });
    };
    return this.project(h, () => joined('weight'), c.bias.qkv ? () => joined('bias') : undefined, c.hiddenSize, qSize + 2 * kvSize, 'qkv_proj');
  }

  //   separate: h ─► q_proj, k_proj, v_proj
  //   fused:    h ─► qkv_proj [(heads + 2·kv_heads)·D] ─Split─► q, k, v
  private qkvProjections(prefix: string, h: string): { q: string; k: string; v: string } {
    const { g, c } = this;
    const qkv = this.spec.qkv;
    const [qSize, kvSize] = [c.numHeads * c.headDim, c.numKvHeads * c.headDim];
    const withBias = c.bias.qkv;
    switch (qkv.kind) {
      case 'separate':
        return {
          q: this.linear(prefix + qkv.q, h, c.hiddenSize, qSize, withBias, 'q_proj'),
          k: this.linear(prefix + qkv.k, h, c.hiddenSize, kvSize, withBias, 'k_proj'),
          v: this.linear(prefix + qkv.v, h, c.hiddenSize, kvSize, withBias, 'v_proj'),
        };
      case 'fused': {
        const fused = this.linear(prefix + qkv.qkv, h, c.hiddenSize, qSize + 2 * kvSize, withBias, 'qkv_proj');
        const [q, k, v] = g.nodeN('Split', 'qkv_split', [fused, g.ints([qSize, kvSize, kvSize])], { outputs: 3, attrs: { axis: -1 } });
        return { q: q!, k: k!, v: v! };
      }
      default:
        return unreachable(qkv);
    }
  }

  // x is q [B,kv,G,T,D] (rank 5, its tables made 5-D by the caller), k [B,kv,T,D] (rank 4), or
  // on WebGPU either as its projection [B,T,heads·D] (rank 3).
  //   tables: x ─┬─ Mul(cos) ──────────────────────────────────┐
  //              └─ Split(halves) ─► Concat(-x2, x1) ─ Mul(sin) ─ Add ─► rotated
  //     Partial rotary (Phi-3): x ─Split─► [first R dims, the rest] ─► rotate the first ─Concat(rest)─►
  //   fused:  x [B,T,heads·D] (rank 3) or x ─Reshape [B,heads,T,D]─►
  //           RotaryEmbedding(positions, caches, R) ─Reshape─► (the rest of D passes through)
  private applyRope(x: string, t: Rope, layout: { rank: 3 | 4; heads: number } | { rank: 5 }): string {
    const { g, c } = this;
    switch (t.kind) {
      case 'fused': {
        const { rank } = layout;
        const heads = rank === 5 ? g.node('Reshape', [x, g.ints([0, c.numHeads, -1, c.headDim])], { name: 'heads' }) : x;
        const rotated = g.node('RotaryEmbedding', [heads, t.positions, t.cosCache, t.sinCache], {
          name: 'rotated',
          domain: 'com.microsoft',
          attrs: { interleaved: 0, num_heads: layout.rank === 5 ? c.numHeads : layout.heads, rotary_embedding_dim: t.rotaryDim },
        });
        return rank === 5 ? g.node('Reshape', [rotated, g.ints([0, c.numKvHeads, c.numHeads / c.numKvHeads, -1, c.headDim])], { name: 'groups' }) : rotated;
      }
      case 'tables': {
        const pass = c.headDim - t.rotaryDim;
        const [rot, rest] =
          pass > 0 ? (g.nodeN('Split', 'rotary_part', [x, g.ints([t.rotaryDim, pass])], { outputs: 2, attrs: { axis: -1 } }) as [string, string]) : [x, undefined];
        const [x1, x2] = g.nodeN('Split', 'halves', [rot], { outputs: 2, attrs: { axis: -1, num_outputs: 2 } }) as [string, string];
        const rotated = g.node('Concat', [g.node('Neg', [x2], { name: 'neg_x2' }), x1], { name: 'rotate_half', attrs: { axis: -1 } });
        const a = g.node('Mul', [rot, t.cos], { name: 'x_cos' });
        const b = g.node('Mul', [rotated, t.sin], { name: 'rotated_sin' });
        const out = g.node('Add', [a, b], { name: 'rotated' });
        return rest ? g.node('Concat', [out, rest], { name: 'with_pass', attrs: { axis: -1 } }) : out;
      }
      default:
        return unreachable(t);
    }
  }

  //   gated (Llama):      x ─► gate_proj ─► act ─┐
  //                       x ─► up_proj ──────── Mul ─► down_proj
  //   gatedFused (Phi-3): x ─► gate_up_proj ─Split─► gate, up ─► (as gated) ─► down_proj
  //   plain (GPT-2):      x ─► c_fc ─► act ─► c_proj
  //   moe (Mixtral, Qwen3-MoE): see moeBlock; its dense layers as gated
  private mlp(prefix: string, x: string, layer: number): string {
    const { g, c } = this;
    const m = this.spec.mlp;
    const [H, I, withBias] = [c.hiddenSize, c.intermediateSize, c.bias.mlp];
    const gated = (gate: string, up: string, down: string) =>
      this.linear(prefix + down, g.node('Mul', [this.activation(gate), up], { name: 'gated' }), I, H, withBias, 'down_proj');
    switch (m.kind) {
      case 'gated': {
        const gate = this.linear(prefix + m.gate, x, H, I, withBias, 'gate_proj');
        const up = this.linear(prefix + m.up, x, H, I, withBias, 'up_proj');
        return gated(gate, up, m.down);
      }
      case 'moe': {
        if (c.moe!.sparseLayers[layer]) return this.moeBlock(prefix, x, m);
        if (!m.dense) throw new Error(`${c.modelType}: layer ${layer} is dense but the family has no dense MLP`);
        const gate = this.linear(prefix + m.dense.gate, x, H, I, withBias, 'gate_proj');
        const up = this.linear(prefix + m.dense.up, x, H, I, withBias, 'up_proj');
        return gated(gate, up, m.dense.down);
      }
      case 'gatedFused': {
        const both = this.linear(prefix + m.gateUp, x, H, 2 * I, withBias, 'gate_up_proj');
        const [gate, up] = g.nodeN('Split', 'gate_up_split', [both], { outputs: 2, attrs: { axis: -1, num_outputs: 2 } });
        return gated(gate!, up!, m.down);
      }
      case 'plain': {
        const fc = this.linear(prefix + m.fc, x, H, I, withBias, 'fc');
        return this.linear(prefix + m.proj, this.activation(fc), I, H, withBias, 'proj');
      }
      default:
        return unreachable(m);
    }
  }

  // Sparse experts, computing each expert on its own tokens only (as transformers' loop
  // over experts, in the graph):
  //   x [B,T,H] ─Reshape─► [N,H] ─router─► logits [N,E] ─Softmax (f32)─► TopK(k) ─► weights [N,k], chosen [N,k]
  //     (─ ÷ ReduceSum ─ when renormalised)
  //   per expert e: Equal(chosen, e) ─► its tokens' rows (NonZero) and weights (ReduceSum of Where)
  //     Gather(x, rows) ─► gate/up/act/down ─► × weight
  //   all experts' rows and outputs ─combine (ScatterND add; WebGPU: ordered gathers)─► [N,H] ─Reshape─► [B,T,H]
  // Each token's outputs are added in expert order, as transformers' index_add_ loop does.
  private moeBlock(prefix: string, x: string, m: Extract<MlpSpec, { kind: 'moe' }>): string {
    const { g, c } = this;
    const moe = c.moe!;
    const [H, I, E] = [c.hiddenSize, moe.expertIntermediate, moe.experts];
    const flat = g.node('Reshape', [x, g.ints([-1, H])], { name: 'tokens' });
    const logits = this.toFloat32(this.linear(prefix + m.router, flat, H, E, false, 'router'));
    const probs = g.node('Softmax', [logits], { name: 'router_probs', attrs: { axis: -1 } });
    const [top, chosen] = g.nodeN('TopK', 'top_experts', [probs, g.ints([moe.topK])], { outputs: 2, attrs: { axis: -1 } }) as [string, string];
    const weights = moe.renormalize
      ? g.node('Div', [top, g.node('ReduceSum', [top, g.ints([-1])], { name: 'top_sum', attrs: { keepdims: 1 } })], { name: 'renormalised' })
      : top;
    const rows: string[] = [];
    const routedBy: string[] = [];
    const outputs: string[] = [];
    for (let e = 0; e < E; e++) {
      g.scope(`experts.${e}`, () => {
        const mine = g.node('Equal', [chosen, g.ints([e])], { name: 'chosen' });
        const weight = g.node('ReduceSum', [g.node('Where', [mine, weights, g.scalar(0)], { name: 'own_weight' }), g.ints([-1])], {
          name: 'weight',
          attrs: { keepdims: 0 },
        });
        const routed = g.node('ReduceMax', [g.cast(mine, 'float32', 'bool', 'chosen_f32'), g.ints([-1])], { name: 'routed', attrs: { keepdims: 0 } });
        const idx = g.node('Reshape', [g.nonZero(routed), g.ints([-1])], { name: 'rows' });
        const xe = g.node('Gather', [flat, idx], { name: 'tokens', attrs: { axis: 0 } });
        const name = (part: string) => `${prefix}${m.experts}.${e}.${part}`;
        const gate = this.linear(name(m.expert.gate), xe, H, I, false, 'gate_proj');
        const up = this.linear(name(m.expert.up), xe, H, I, false, 'up_proj');
        const y = this.linear(name(m.expert.down), g.node('Mul', [this.activation(gate), up], { name: 'gated' }), I, H, false, 'down_proj');
        const w = this.fromFloat32(g.node('Unsqueeze', [g.node('Gather', [weight, idx], { name: 'row_weight', attrs: { axis: 0 } }), g.ints([-1])], { name: 'row_weight_2d' }));
        rows.push(idx);
        routedBy.push(routed);
        outputs.push(g.node('Mul', [y, w], { name: 'weighted' }));
      });
    }
    const summed = g.combineExperts(flat, rows, outputs, routedBy, moe.topK, this.dt);
    return g.node('Reshape', [summed, g.node('Shape', [x], { name: 'input_shape' })], { name: 'output' });
  }

  // Only the scored positions reach the output projection:
  //   x [B,T,H] ─Reshape─► [B·T,H] ─Gather(score_rows)─► [N,H] ─final norm─► lm_head ─► logits [N,V] float32
  private head(x: string, scoreRows: string): string {
    const { g, c } = this;
    const flat = g.node('Reshape', [x, g.ints([-1, c.hiddenSize])], { name: 'flatten_positions' });
    const scored = g.node('Gather', [flat, scoreRows], { name: 'scored_positions', attrs: { axis: 0 } });
    const normed = g.scope('norm', () => this.norm(scored, this.spec.finalNorm, c.hiddenSize, 'any'));
    const head = this.weight(c.tiedEmbeddings ? this.spec.embed : this.spec.lmHead, [c.vocabSize, c.hiddenSize]);
    const logits = this.toFloat32(
      g.scope('lm_head', () => g.matMulT(normed, head)),
    );
    return this.softcap(logits, c.finalSoftcap, 'logits_softcap');
  }

}

/** cos and sin of position × frequency for every position below `positions`, one block of
 * rows per frequency variant, as transformers computes them in float32 (the angle rounded
 * to float32, then cos/sin, then × the attention factor in float32). */
function rotaryValues(variants: Float32Array[], positions: number, factor: number): { cos: Float32Array; sin: Float32Array } {
  const half = variants[0]!.length;
  const cos = new Float32Array(variants.length * positions * half);
  const sin = new Float32Array(variants.length * positions * half);
  const f = Math.fround(factor);
  variants.forEach((inv, v) => {
    for (let p = 0; p < positions; p++) {
      const row = (v * positions + p) * half;
      for (let i = 0; i < half; i++) {
        const angle = Math.fround(inv[i]! * p);
        cos[row + i] = f === 1 ? Math.cos(angle) : Math.fround(Math.cos(angle)) * f;
        sin[row + i] = f === 1 ? Math.sin(angle) : Math.fround(Math.sin(angle)) * f;
      }
    }
  });
  return { cos, sin };
}
