// The scoring graph of a decoder-only causal LM, built from a Hugging Face checkpoint.
//
// Read it top to bottom like nanoGPT: embeddings, then each decoder layer (norm →
// attention → residual → norm → MLP → residual), then the final norm and the output
// projection on the scored positions only, then the log-prob kernel. Family
// differences come from `config.spec` (families.ts), never from copied code.
//
// Inputs (B rows of T new tokens, S = P + T key slots, N scored positions):
//   input_ids     [B, T] int64
//   position_ids  [B, T] int64    absolute position of each new token
//   key_positions [B, S] int64    position of each key slot (past then new), -1 = masked
//   past_index    [B]    int64    which row of the past KV each row continues
//   past.L.key / past.L.value  [Bp, kv_heads, P, head_dim]  (P may be 0)
//   score_rows    [N]    int64    flat index b·T + t of each scored position
//   target_ids    [N]    int64    the token each scored position should predict
//   top_k         [1]    int64
// Outputs: logprobs [N], greedy [N], topk_logprobs [N, k], topk_ids [N, k],
//   present.L.key / present.L.value [B, kv_heads, S, head_dim].
import { GraphBuilder, float, type DTypeName } from '../graph/builder.js';
import type { SafetensorsCheckpoint } from '../checkpoint/safetensors.js';
import type { ModelConfig } from './families.js';
import { logprobKernel } from '../../kernels/logprobs.js';
import { heatmapKeys, layerProbe, probeInputs, type LayerProbe, type ProbeInputs } from '../../kernels/attention.js';

export type ComputeDType = 'float32' | 'float16' | 'bfloat16';

/** The dtype of past/present KV at the graph boundary: onnxruntime-node has no
 * bfloat16 tensors, so bf16 graphs exchange their cache as float32. */
export function kvDType(dtype: ComputeDType): 'float32' | 'float16' {
  return dtype === 'float16' ? 'float16' : 'float32';
}

export interface DecoderGraph {
  model: Uint8Array;
  weightsDir: string;
  nodeCount: number;
}

/** `scoring`: log-probs of scored positions. `probe`: attention statistics instead
 * (kernels/attention.ts), with extra inputs key_bin [B,S], query_weight [B,T],
 * num_bins [1], raw_heads [Hr], raw_queries [Q], probe_top_keys [1]. */
export type GraphKind = 'scoring' | 'probe';

export function buildDecoderGraph(
  config: ModelConfig,
  ckpt: SafetensorsCheckpoint,
  dtype: ComputeDType = 'float32',
  kind: GraphKind = 'scoring',
): DecoderGraph {
  const b = new DecoderBuilder(config, ckpt, dtype, kind);
  b.build();
  return { model: b.g.encode(`ctxprobe/${config.modelType}`), weightsDir: ckpt.weightsDir, nodeCount: b.g.nodeCount };
}

class DecoderBuilder {
  readonly g = new GraphBuilder();
  private readonly w;
  private readonly maskValue: number;

  constructor(
    private readonly c: ModelConfig,
    private readonly ckpt: SafetensorsCheckpoint,
    private readonly dt: ComputeDType,
    private readonly kind: GraphKind,
  ) {
    this.w = c.spec.weights;
    // Finite, so fully masked (padding) rows never produce NaN that 0·NaN could spread.
    this.maskValue = dt === 'float32' ? -1e30 : -1e4;
  }

  private probe?: ProbeInputs;
  private poolMax = '';
  private poolSum = '';
  private readonly layerProbes: LayerProbe[] = [];
  private allowed = '';

  build(): void {
    const { g, c } = this;
    const inputIds = g.input('input_ids', 'int64', ['batch', 'seq']);
    const positionIds = g.input('position_ids', 'int64', ['batch', 'seq']);
    const keyPositions = g.input('key_positions', 'int64', ['batch', 'total']);
    const pastIndex = g.input('past_index', 'int64', ['batch']);
    if (this.kind === 'probe') {
      const keyBin = g.input('key_bin', 'int64', ['batch', 'total']);
      const queryWeight = g.input('query_weight', 'float32', ['batch', 'seq']);
      const numBins = g.input('num_bins', 'int64', [1]);
      const rawHeads = g.input('raw_heads', 'int64', ['raw_heads']);
      const rawQueries = g.input('raw_queries', 'int64', ['raw_queries']);
      const topKeys = g.input('probe_top_keys', 'int64', [1]);
      this.probe = g.scope('model', () => probeInputs(g, keyBin, queryWeight, numBins, rawHeads, rawQueries, topKeys));
    }

    let x = g.scope('model', () => this.embed(inputIds, positionIds));
    const bias = g.scope('model/attn_mask', () => this.attentionBias(positionIds, keyPositions));
    const rope = c.rope ? g.scope('model/rotary', () => this.rotaryTables(positionIds)) : undefined;

    for (let i = 0; i < c.numLayers; i++) {
      const kvType = kvDType(this.dt);
      const pastKey = g.input(`past.${i}.key`, kvType, ['past_batch', c.numKvHeads, 'past', c.headDim]);
      const pastValue = g.input(`past.${i}.value`, kvType, ['past_batch', c.numKvHeads, 'past', c.headDim]);
      const layer = g.scope(`model/layers.${i}`, () =>
        this.decoderLayer(i, x, bias, rope, { key: pastKey, value: pastValue, index: pastIndex }),
      );
      x = layer.hidden;
      if (this.probe) x = g.scope(`model/layers.${i}/probe`, () => this.poolAndOrder(i, layer.hidden));
      const presentKey = g.scope(`model/layers.${i}`, () => this.kvOut(layer.presentKey));
      const presentValue = g.scope(`model/layers.${i}`, () => this.kvOut(layer.presentValue));
      g.output(`present.${i}.key`, presentKey, kvType, ['batch', c.numKvHeads, 'total', c.headDim]);
      g.output(`present.${i}.value`, presentValue, kvType, ['batch', c.numKvHeads, 'total', c.headDim]);
    }

    if (this.kind === 'probe') return g.scope('model/probe', () => this.probeOutputs());

    const scoreRows = g.input('score_rows', 'int64', ['scored']);
    const targetIds = g.input('target_ids', 'int64', ['scored']);
    const topK = g.input('top_k', 'int64', [1]);
    // Only the scored positions reach the output projection: [B,T,H] → [N,H] → [N,V].
    const logits = g.scope('model', () => {
      const flat = g.node('Reshape', [x, g.ints([-1, c.hiddenSize], 'rows_by_hidden')], { name: 'flatten_positions' });
      const scored = g.node('Gather', [flat, scoreRows], { name: 'scored_positions', attrs: { axis: 0 } });
      const normed = g.scope('norm', () => this.norm(scored, this.w.finalNorm));
      const headName = c.tiedEmbeddings ? this.w.embed : this.w.lmHead;
      const head = this.weight(headName, [c.vocabSize, c.hiddenSize]);
      const out = g.scope('lm_head', () => g.node('FusedMatMul', [normed, head], { domain: 'com.microsoft', attrs: { transB: 1 } }));
      return this.toFloat32(out);
    });

    const k = logprobKernel(g, logits, targetIds, topK);
    g.output('logprobs', k.logprobs, 'float32', ['scored']);
    g.output('greedy', k.greedy, 'bool', ['scored']);
    g.output('topk_logprobs', k.topkLogprobs, 'float32', ['scored', 'k']);
    g.output('topk_ids', k.topkIds, 'int64', ['scored', 'k']);
  }

  // Per-layer probes stacked to [B, layers, …]; the pooled maps (max and mean over
  // layers and heads) reduced over key bins:
  //   votes, sink_votes, mass, sink_mass: Concat over layers
  //   pooled max / mean [B,T,S] ─heatmapKeys─► key_max, key_sum [B,T,bins];  allowed ─MatMul─► key_count
  private probeOutputs(): void {
    const { g, c } = this;
    const p = this.probe!;
    const stack = (pick: (l: LayerProbe) => string, name: string) =>
      g.node(
        'Concat',
        this.layerProbes.map((l, i) => g.node('Unsqueeze', [pick(l), g.ints([1], 'axis_1')], { name: `${name}_${i}` })),
        {
          name,
          attrs: { axis: 1 },
        },
      );
    const perLayer: [string, (l: LayerProbe) => string, boolean][] = [
      ['votes', (l) => l.votes, true],
      ['sink_votes', (l) => l.sinkVotes, false],
      ['mass', (l) => l.mass, true],
      ['sink_mass', (l) => l.sinkMass, false],
    ];
    for (const [name, pick, withBins] of perLayer) {
      g.output(`probe.${name}`, stack(pick, name), 'float32', ['batch', c.numLayers, c.numHeads, ...(withBins ? ['bins'] : [])]);
    }
    this.layerProbes.forEach((l, i) => g.output(`raw.${i}`, l.raw, 'float32', ['batch', 'raw_heads', 'raw_queries', 'total']));

    const { poolMax, poolSum } = this;
    const poolMean = g.node('Div', [poolSum, g.scalar(c.numLayers * c.numHeads, 'layers_x_heads')], { name: 'pool_mean' });
    for (const [name, pooled] of [
      ['max', poolMax],
      ['mean', poolMean],
    ] as const) {
      const h = heatmapKeys(g, pooled, p.keyBin, p.keyBinsOneHot3, p.numBins, `heat_${name}`);
      g.output(`heat.${name}.key_max`, h.keyMax, 'float32', ['batch', 'seq', 'bins']);
      g.output(`heat.${name}.key_sum`, h.keySum, 'float32', ['batch', 'seq', 'bins']);
    }
    const allowed = g.node('Cast', [this.allowed], { name: 'allowed_f', attrs: { to: 1 } });
    g.output('heat.key_count', g.node('MatMul', [allowed, p.keyBinsOneHot3], { name: 'key_count' }), 'float32', ['batch', 'seq', 'bins']);
  }

  // Pool layer i's attention into the running max / sum over layers, and make the next
  // layer wait for this layer's probe: onnxruntime's default order may otherwise run
  // the reductions late and keep every layer's probabilities alive at once.
  //   head_max, head_sum ─Max / Add─► pools;  one element of each result ─ReduceSum─×0─+─► hidden
  private poolAndOrder(i: number, hidden: string): string {
    const { g } = this;
    const lp = this.layerProbes[i]!;
    this.poolMax = i === 0 ? lp.headMax : g.node('Max', [this.poolMax, lp.headMax], { name: 'pool_max' });
    this.poolSum = i === 0 ? lp.headSum : g.node('Add', [this.poolSum, lp.headSum], { name: 'pool_sum' });
    // Any element of each result makes the dependency; one element is enough.
    const one = (x: string, name: string) =>
      g.node(
        'Slice',
        [g.node('Reshape', [x, g.ints([-1], 'flat')], { name: `${name}_flat` }), g.ints([0], 'start_0'), g.ints([1], 'end_1')],
        { name: `${name}_first` },
      );
    const parts = [
      one(lp.votes, 'votes'),
      one(lp.sinkVotes, 'sink_votes'),
      one(lp.mass, 'mass'),
      one(lp.sinkMass, 'sink_mass'),
      one(lp.raw, 'raw'),
      one(this.poolMax, 'pool_max'),
      one(this.poolSum, 'pool_sum'),
    ];
    const anchor = g.node('ReduceSum', [g.node('Concat', parts, { name: 'parts', attrs: { axis: 0 } })], {
      name: 'anchor',
      attrs: { keepdims: 0 },
    });
    const zero = g.node('Mul', [anchor, g.scalar(0, 'zero')], { name: 'zero_anchor' });
    return g.node('Add', [hidden, this.fromFloat32(zero)], { name: 'ordered_hidden' });
  }

  // input_ids ──Gather(embed)──► x ──(+ Gather(wpe, position_ids) for learned positions)
  private embed(inputIds: string, positionIds: string): string {
    const { g, c } = this;
    const table = this.weight(this.w.embed, [c.vocabSize, c.hiddenSize]);
    let x = g.node('Gather', [table, inputIds], { name: 'embed_tokens', attrs: { axis: 0 } });
    if (this.w.positionEmbed) {
      const wpe = this.weight(this.w.positionEmbed, [c.maxPositions, c.hiddenSize]);
      const pos = g.node('Gather', [wpe, positionIds], { name: 'embed_positions', attrs: { axis: 0 } });
      x = g.node('Add', [x, pos], { name: 'embed_sum' });
    }
    return x;
  }

  // One additive mask for every layer, from positions (so left/right padding and a
  // shared past all follow the same rule):
  //   key_positions [B,S] ─Unsqueeze─► [B,1,S] ─┬─ LessOrEqual(q) ──┐
  //   position_ids  [B,T] ─Unsqueeze─► [B,T,1] ─┘  GreaterOrEqual(0)─And─(window)─► Where(0, -big) ─► [B,1,1,T,S]
  private attentionBias(positionIds: string, keyPositions: string): string {
    const { g } = this;
    const q = g.node('Unsqueeze', [positionIds, g.ints([2])], { name: 'query_positions' });
    const k = g.node('Unsqueeze', [keyPositions, g.ints([1])], { name: 'key_positions' });
    const causal = g.node('LessOrEqual', [k, q], { name: 'causal' });
    const valid = g.node('GreaterOrEqual', [k, g.constant('/constants/zero_i64', 'int64', [], [0])], { name: 'valid_keys' });
    let allowed = g.node('And', [causal, valid], { name: 'allowed' });
    if (this.c.slidingWindow !== undefined) {
      const distance = g.node('Sub', [q, k], { name: 'distance' });
      const window = g.constant('/constants/sliding_window', 'int64', [], [this.c.slidingWindow]);
      const inWindow = g.node('Less', [distance, window], { name: 'in_window' });
      allowed = g.node('And', [allowed, inWindow], { name: 'allowed_in_window' });
    }
    this.allowed = allowed;
    const bias = g.node(
      'Where',
      [allowed, this.floatConst(0, 'zero', 'float32'), this.floatConst(this.maskValue, 'mask_value', 'float32')],
      {
        name: 'bias',
      },
    );
    return g.node('Unsqueeze', [bias, g.ints([1, 2])], { name: 'bias_5d' });
  }

  // cos/sin for every new token, shared by all layers (transformers' rotate-half form):
  //   position_ids ─Cast─Unsqueeze─► [B,T,1] ─Mul(inv_freq)─► [B,T,D/2] ─Concat(x2)─► [B,T,D] ─Cos/Sin─► [B,1,T,D]
  private rotaryTables(positionIds: string): { cos: string; sin: string } {
    const { g, c } = this;
    const pos = g.node('Cast', [positionIds], { name: 'positions_f32', attrs: { to: 1 } });
    const pos3 = g.node('Unsqueeze', [pos, g.ints([-1])], { name: 'positions_3d' });
    const invFreq = g.constant('/model/rotary/inv_freq', 'float32', [c.rope!.invFreq.length], c.rope!.invFreq);
    const freqs = g.node('Mul', [pos3, invFreq], { name: 'freqs' });
    const emb = g.node('Concat', [freqs, freqs], { name: 'emb', attrs: { axis: -1 } });
    const heads = g.ints([1], 'axis_1');
    const cos = g.node('Unsqueeze', [this.fromFloat32(g.node('Cos', [emb], { name: 'cos' })), heads], { name: 'cos_4d' });
    const sin = g.node('Unsqueeze', [this.fromFloat32(g.node('Sin', [emb], { name: 'sin' })), heads], { name: 'sin_4d' });
    return { cos, sin };
  }

  //   x ─► norm ─► attention ─► + ─► norm ─► mlp ─► + ─► hidden
  //   └────────────────────────┘ └────────────────────┘
  private decoderLayer(
    i: number,
    x: string,
    bias: string,
    rope: { cos: string; sin: string } | undefined,
    past: { key: string; value: string; index: string },
  ) {
    const { g } = this;
    const prefix = this.w.layer(i);
    const h = g.scope('input_norm', () => this.norm(x, prefix + this.w.inputNorm));
    const attn = g.scope('attn', () => this.attention(prefix, h, bias, rope, past));
    const afterAttn = g.node('Add', [x, attn.out], { name: 'attn_residual' });
    const h2 = g.scope('post_attention_norm', () => this.norm(afterAttn, prefix + this.w.postAttentionNorm));
    const mlp = g.scope('mlp', () => this.mlp(prefix, h2));
    const hidden = g.node('Add', [afterAttn, mlp], { name: 'mlp_residual' });
    return { hidden, presentKey: attn.presentKey, presentValue: attn.presentValue };
  }

  // Grouped-query attention without repeating K/V: queries are laid out
  // [B, kv_heads, group, T, D] and K/V [B, kv_heads, 1, S, D], so MatMul broadcasts.
  //   h ─► q_proj ─Reshape/Transpose─► q [B,kv,G,T,D] ─rope─────────────┐
  //   h ─► k_proj ─Reshape/Transpose─► k [B,kv,T,D] ─rope─Concat(past)─► present_k ─Unsqueeze─► FusedMatMul(q,kᵀ,·1/√D) + bias ─► Softmax ─► probs
  //   h ─► v_proj ─Reshape/Transpose─► v [B,kv,T,D] ──────Concat(past)─► present_v ─Unsqueeze─► MatMul(probs, v) ─► [B,T,H] ─► o_proj
  private attention(
    prefix: string,
    h: string,
    bias: string,
    rope: { cos: string; sin: string } | undefined,
    past: { key: string; value: string; index: string },
  ) {
    const { g, c } = this;
    const D = c.headDim;
    const kv = c.numKvHeads;
    const group = c.numHeads / kv;
    const qkv = this.w.qkv;
    let q: string, k: string, v: string;
    if ('fused' in qkv) {
      const fused = this.linear(prefix + qkv.fused, h, c.hiddenSize, 3 * c.numHeads * D, this.c.spec.bias.qkv, 'qkv_proj');
      [q, k, v] = g.nodeN('Split', 'qkv_split', [fused, g.ints([c.numHeads * D, kv * D, kv * D], 'qkv_sizes')], {
        outputs: 3,
        attrs: { axis: -1 },
      }) as [string, string, string];
    } else {
      q = this.linear(prefix + qkv.q, h, c.hiddenSize, c.numHeads * D, c.spec.bias.qkv, 'q_proj');
      k = this.linear(prefix + qkv.k, h, c.hiddenSize, kv * D, c.spec.bias.qkv, 'k_proj');
      v = this.linear(prefix + qkv.v, h, c.hiddenSize, kv * D, c.spec.bias.qkv, 'v_proj');
    }
    q = g.node('Reshape', [q, g.ints([0, 0, kv, group, D], 'q_shape')], { name: 'q_heads' });
    q = g.node('Transpose', [q], { name: 'q_layout', attrs: { perm: [0, 2, 3, 1, 4] } });
    k = g.node('Reshape', [k, g.ints([0, 0, kv, D], 'kv_shape')], { name: 'k_heads' });
    k = g.node('Transpose', [k], { name: 'k_layout', attrs: { perm: [0, 2, 1, 3] } });
    v = g.node('Reshape', [v, g.ints([0, 0, kv, D], 'kv_shape')], { name: 'v_heads' });
    v = g.node('Transpose', [v], { name: 'v_layout', attrs: { perm: [0, 2, 1, 3] } });
    if (rope) {
      const q5 = {
        cos: g.node('Unsqueeze', [rope.cos, g.ints([1], 'axis_1')], { name: 'cos_5d' }),
        sin: g.node('Unsqueeze', [rope.sin, g.ints([1], 'axis_1')], { name: 'sin_5d' }),
      };
      q = g.scope('q_rope', () => this.applyRope(q, q5));
      k = g.scope('k_rope', () => this.applyRope(k, rope));
    }
    // A batch-1 (or per-context) past serves many rows: gather it per row, in the graph.
    const pastKey = this.kvIn(g.node('Gather', [past.key, past.index], { name: 'past_key', attrs: { axis: 0 } }));
    const pastValue = this.kvIn(g.node('Gather', [past.value, past.index], { name: 'past_value', attrs: { axis: 0 } }));
    const presentKey = g.node('Concat', [pastKey, k], { name: 'present_key', attrs: { axis: 2 } });
    const presentValue = g.node('Concat', [pastValue, v], { name: 'present_value', attrs: { axis: 2 } });
    const keys = g.node('Unsqueeze', [presentKey, g.ints([2], 'axis_2')], { name: 'keys_5d' });
    const values = g.node('Unsqueeze', [presentValue, g.ints([2], 'axis_2')], { name: 'values_5d' });
    const scores = g.node('FusedMatMul', [q, keys], {
      name: 'scores',
      domain: 'com.microsoft',
      attrs: { transB: 1, alpha: float(1 / Math.sqrt(D)) },
    });
    const masked = g.node('Add', [this.toFloat32(scores), bias], { name: 'masked_scores' });
    const probs32 = g.node('Softmax', [masked], { name: 'probs', attrs: { axis: -1 } });
    if (this.probe) this.layerProbes.push(layerProbe(g, probs32, this.probe, c.numHeads));
    const probs = this.fromFloat32(probs32);
    let ctx = g.node('MatMul', [probs, values], { name: 'context' });
    ctx = g.node('Transpose', [ctx], { name: 'context_layout', attrs: { perm: [0, 3, 1, 2, 4] } });
    ctx = g.node('Reshape', [ctx, g.ints([0, 0, c.numHeads * D], 'merge_heads')], { name: 'merge_heads' });
    const out = this.linear(prefix + this.w.o, ctx, c.numHeads * D, c.hiddenSize, c.spec.bias.o, 'o_proj');
    return { out, presentKey, presentValue };
  }

  //   x ─┬─ Mul(cos) ──────────────────────────────────┐
  //      └─ Split(halves) ─► Concat(-x2, x1) ─ Mul(sin) ─ Add ─► rotated
  private applyRope(x: string, t: { cos: string; sin: string }): string {
    const { g } = this;
    const [x1, x2] = g.nodeN('Split', 'halves', [x], { outputs: 2, attrs: { axis: -1, num_outputs: 2 } }) as [string, string];
    const rotated = g.node('Concat', [g.node('Neg', [x2], { name: 'neg_x2' }), x1], { name: 'rotate_half', attrs: { axis: -1 } });
    const a = g.node('Mul', [x, t.cos], { name: 'x_cos' });
    const b = g.node('Mul', [rotated, t.sin], { name: 'rotated_sin' });
    return g.node('Add', [a, b], { name: 'rotated' });
  }

  //   gated (Llama):  x ─► gate_proj ─► act ─┐
  //                   x ─► up_proj ──────── Mul ─► down_proj
  //   plain (GPT-2):  x ─► c_fc ─► act ─► c_proj
  private mlp(prefix: string, x: string): string {
    const { c } = this;
    const m = this.w.mlp;
    if ('gate' in m) {
      const gate = this.linear(prefix + m.gate, x, c.hiddenSize, c.intermediateSize, c.spec.bias.mlp, 'gate_proj');
      const up = this.linear(prefix + m.up, x, c.hiddenSize, c.intermediateSize, c.spec.bias.mlp, 'up_proj');
      const act = this.activation(gate);
      const prod = this.g.node('Mul', [act, up], { name: 'gated' });
      return this.linear(prefix + m.down, prod, c.intermediateSize, c.hiddenSize, c.spec.bias.mlp, 'down_proj');
    }
    const fc = this.linear(prefix + m.fc, x, c.hiddenSize, c.intermediateSize, c.spec.bias.mlp, 'fc');
    return this.linear(prefix + m.proj, this.activation(fc), c.intermediateSize, c.hiddenSize, c.spec.bias.mlp, 'proj');
  }

  private activation(x: string): string {
    const { g } = this;
    switch (this.c.activation) {
      case 'silu':
        return g.node('Mul', [x, g.node('Sigmoid', [x], { name: 'sigmoid' })], { name: 'silu' });
      case 'gelu_tanh':
        return g.node('Gelu', [x], { name: 'gelu_tanh', attrs: { approximate: 'tanh' } });
      case 'gelu':
        return g.node('Gelu', [x], { name: 'gelu' });
    }
  }

  // RMSNorm in the shape ORT fuses into SimplifiedLayerNormalization:
  //   x ─► Pow(2) ─► ReduceMean ─► Add(eps) ─► Sqrt ─► Div(x, ·) ─► Mul(weight)
  // LayerNorm (GPT-2): one LayerNormalization op with weight and bias.
  private norm(x: string, name: string): string {
    const { g, c } = this;
    const weight = this.weight(`${name}.weight`, [c.hiddenSize]);
    const x32 = this.toFloat32(x);
    if (c.spec.norm === 'layer') {
      const bias = this.weight(`${name}.bias`, [c.hiddenSize], 'float32');
      return this.fromFloat32(
        g.node('LayerNormalization', [x32, this.weightAs(weight, 'float32'), bias], { attrs: { axis: -1, epsilon: float(c.normEps) } }),
      );
    }
    const sq = g.node('Pow', [x32, this.floatConst(2, 'two', 'float32')], { name: 'square' });
    const mean = g.node('ReduceMean', [sq, g.ints([-1], 'axis_last')], { name: 'mean_square', attrs: { keepdims: 1 } });
    const eps = g.node('Add', [mean, this.floatConst(c.normEps, 'eps', 'float32')], { name: 'plus_eps' });
    const rms = g.node('Sqrt', [eps], { name: 'rms' });
    const normed = g.node('Div', [x32, rms], { name: 'normalized' });
    return this.fromFloat32(g.node('Mul', [normed, this.weightAs(weight, 'float32')], { name: 'scaled' }));
  }

  //   x ─► FusedMatMul(W, transB) or MatMul(W) for Conv1D ─► (+ bias)
  private linear(name: string, x: string, inFeatures: number, outFeatures: number, withBias: boolean, label: string): string {
    const { g } = this;
    return g.scope(label, () => {
      let y: string;
      if (this.c.spec.linearLayout === 'out_in') {
        const w = this.weight(`${name}.weight`, [outFeatures, inFeatures]);
        y = g.node('FusedMatMul', [x, w], { domain: 'com.microsoft', attrs: { transB: 1 } });
      } else {
        const w = this.weight(`${name}.weight`, [inFeatures, outFeatures]);
        y = g.node('MatMul', [x, w]);
      }
      if (withBias) y = g.node('Add', [y, this.weight(`${name}.bias`, [outFeatures])], { name: 'bias' });
      return y;
    });
  }

  private readonly weights = new Map<string, string>();

  /** A checkpoint tensor in the compute dtype (a Cast ORT folds at load when it differs). */
  private weight(name: string, shape: number[], as: DTypeName = this.dt): string {
    const key = `${name}:${as}`;
    const known = this.weights.get(key);
    if (known) return known;
    const stored = this.ckpt.get(this.storedName(name), shape);
    const init = this.weights.get(`${name}:stored`) ?? this.g.external(name, stored);
    this.weights.set(`${name}:stored`, init);
    const value = stored.dtype === as ? init : this.g.node('Cast', [init], { name: 'weight_cast', attrs: { to: dtypeCode(as) } });
    this.weights.set(key, value);
    return value;
  }

  /** The name the checkpoint uses for a weight: the spec's, or one of its alternatives. */
  private storedName(name: string): string {
    if (this.ckpt.has(name)) return name;
    return this.c.spec.alternativeNames?.(name).find((n) => this.ckpt.has(n)) ?? name;
  }

  private weightAs(value: string, as: DTypeName): string {
    return as === this.dt ? value : this.g.node('Cast', [value], { name: 'weight_cast', attrs: { to: dtypeCode(as) } });
  }

  private floatConst(value: number, name: string, as: DTypeName = this.dt): string {
    const c = this.g.scalar(value, name);
    return as === 'float32' ? c : this.g.node('Cast', [c], { name: `${name}_cast`, attrs: { to: dtypeCode(as) } });
  }

  private kvIn(x: string): string {
    return kvDType(this.dt) === this.dt ? x : this.g.node('Cast', [x], { name: 'kv_to_compute', attrs: { to: dtypeCode(this.dt) } });
  }

  private kvOut(x: string): string {
    const io = kvDType(this.dt);
    return io === this.dt ? x : this.g.node('Cast', [x], { name: 'kv_to_io', attrs: { to: dtypeCode(io) } });
  }

  // Norms, softmax and log-softmax run in float32 whatever the compute dtype.
  private toFloat32(x: string): string {
    return this.dt === 'float32' ? x : this.g.node('Cast', [x], { name: 'to_f32', attrs: { to: 1 } });
  }

  private fromFloat32(x: string): string {
    return this.dt === 'float32' ? x : this.g.node('Cast', [x], { name: 'to_compute', attrs: { to: dtypeCode(this.dt) } });
  }
}

function dtypeCode(d: DTypeName): number {
  return { float32: 1, float16: 10, bfloat16: 16, int64: 7, int32: 6, bool: 9 }[d];
}
