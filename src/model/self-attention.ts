// A decoder layer's self-attention, built on the model's ops: the q/k/v projections (one
// product where the provider dispatches each node at a cost), per-head norms, rotary
// embeddings (tables made at load), grouped-query scores without repeating K/V, the mask,
// the softmax a tap may watch, the context and the output projection. Its keys are each
// row's past, then its new slots (model/past.ts). The decoder (decoder.ts) calls
// `attention` once a layer and `rotaryTables` once a pass.
import type { ComputeDType } from '../common/dtypes.js';
import type { ProviderKind } from '../common/providers.js';
import { unreachable } from '../common/unreachable.js';
import type { ModelConfig, RopeSpec } from './families.js';
import { ModelOps, type WeightSource } from './ops.js';
import { placeKv, type Past } from './past.js';
import type { DecoderTap } from './tap.js';

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
export type Rope =
  | { kind: 'tables'; cos: string; sin: string; rotaryDim: number } // [B,1,T,R] each
  | { kind: 'fused'; positions: string; cosCache: string; sinCache: string; rotaryDim: number }; // rows [B,T] of the caches [rows, R/2]

export class AttentionOps extends ModelOps {
  constructor(
    c: ModelConfig,
    source: WeightSource,
    dt: ComputeDType,
    protected readonly tap?: DecoderTap,
    provider: ProviderKind = 'cpu',
  ) {
    super(c, source, dt, provider);
  }

  // cos/sin for every new token, shared by all layers (transformers' rotate-half form, R
  // rotary dimensions), looked up by position in tables made here: onnxruntime's Cos/Sin
  // round an element differently depending on where it sits in the tensor (measured: 1
  // in 1000 angles moved by an ulp when the tensor shifted by 3), so computing them in the
  // graph would make a token's rotation depend on its batch.
  //   position_ids (+ P when the row is long: longrope) ─Gather(cos table, sin table)─► [B,T,R/2] ─Concat(x2)─► [B,1,T,R]
  //   fused rotary (WebGPU): the rows and the tables themselves, for RotaryEmbedding in each layer (Rope)
  protected rotaryTables(positionIds: string, rope: RopeSpec, name: string, sequenceLengths?: string): Rope {
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
    if (g.provider.fusedRotary) {
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


  // Grouped-query attention without repeating K/V: queries are laid out
  // [B, kv_heads, group, T, D] and K/V [B, kv_heads, 1, S, D], so MatMul broadcasts.
  //   h ─► q, k, v projections (qk norms) ─Reshape/Transpose─► q [B,kv,G,T,D], k/v [B,kv,T,D] ─rope(q, k)
  //   k, v ─placeKv(each row's past, then its new slots)─► keys, values ─Unsqueeze─► FusedMatMul(q,kᵀ,·scale) ─(softcap)─ + bias ─► Softmax ─► probs
  //   k, v (the new slots) ─► new.L.key / new.L.value
  //   probs ─MatMul(v)─► [B,T,H·D] ─► o_proj
  protected attention(prefix: string, h: string, bias: string, rope: Rope | undefined, past: Past, layer: number) {
    const { g, c } = this;
    const D = c.headDim;
    const { q: qNorm, k: kNorm } = this.spec.norms;
    // Joint q/k/v (WebGPU), q/k norms per head or none: one product, q and k rotated as one
    // tensor (jointHeads).
    const perHead = qNorm?.over === 'head' && kNorm?.over === 'head' && this.spec.norm !== 'layer';
    const heads =
      g.provider.jointQkv && rope?.kind === 'fused' && ((!qNorm && !kNorm) || perHead) && !this.quantizedQkv(prefix)
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

  // Quantized q/k/v are separate products: their blocks cannot be joined into one weight.
  private quantizedQkv(prefix: string): boolean {
    const qkv = this.spec.qkv;
    const { c } = this;
    const rows = qkv.kind === 'fused' ? (c.numHeads + 2 * c.numKvHeads) * c.headDim : c.numHeads * c.headDim;
    const name = `${prefix}${qkv.kind === 'fused' ? qkv.qkv : qkv.q}.weight`;
    const shape = this.spec.linearLayout === 'out_in' ? [rows, c.hiddenSize] : [c.hiddenSize, rows];
    return this.source.get(this.storedName(name), shape).quantized !== undefined;
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

