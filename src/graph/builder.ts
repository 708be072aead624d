// The ops whose form depends on the provider a graph is for, on the ONNX graph of
// onnx-graph.ts. Where a provider lacks a kernel (common/providers.ts), an equivalent it
// has is emitted (`matMulT`, `logSoftmax`, `oneHot`, `zeros`, …), so no float node falls
// back to the CPU provider unseen: onnxruntime's WebGPU provider (1.30) has no
// `FusedMatMul`, float32 `LogSoftmax`, `OneHot` or `ConstantOfShape` kernel and runs those
// on the CPU without a word (measured on lavapipe: 33 products, the log-softmax and 5
// one-hots of the default model's graph). Where its kernels give a row bits that depend on
// the tensor's shape, a form whose rows do not (`rowMean`, `rowSum`, `rmsNorm`,
// `layerNorm`). Each form's comment names the forms by provider.
import type { DTypeName } from '../common/dtypes.js';
import { OnnxGraph, float } from './onnx-graph.js';

export { OnnxGraph, FloatAttr, float, type AttrValue, type ExternalTensor, type NodeOptions } from './onnx-graph.js';


/** Which rows a norm may see: `several` (a layer's: B·T ≥ 4 on WebGPU, where the engine
 * rounds every pass's query slots up to four) or `any` (the final norm, over the scored
 * positions: one when a pass scores one token). The WebGPU provider's fused norms give a
 * row the same bits whatever the number of rows from two up (lavapipe, 128–5120 features,
 * rows of 2, 4, 5 and 40 against 1,024); a tensor of one row takes another kernel when its
 * width is a multiple of 512, and its bits move (LayerNormalization at 1024,
 * SimplifiedLayerNormalization at 3072). */
export type NormRows = 'several' | 'any';

export class GraphBuilder extends OnnxGraph {

  /** a · bᵀ (· alpha), b's last two axes swapped:
   *   cpu, cuda: FusedMatMul(a, b, transB, alpha)
   *   webgpu:    MatMul(a, Transpose(b)) ─(Mul alpha, float32 only)─►
   * A Transpose of a weight is folded at load (onnxruntime's constant folding), so a
   * linear layer reads a transposed copy and never transposes per pass. */
  matMulT(
    a: string,
    b: string,
    options: { name?: string; rank: number; alpha?: number; dtype?: 'float32' | 'float16' } = { rank: 2 },
  ): string {
    const name = options.name ?? 'FusedMatMul';
    if (this.provider.fusedMatMul) {
      return this.node('FusedMatMul', [a, b], {
        name,
        domain: 'com.microsoft',
        attrs: { transB: 1, ...(options.alpha !== undefined ? { alpha: float(options.alpha) } : {}) },
      });
    }
    const perm = Array.from({ length: options.rank }, (_, i) => i);
    [perm[options.rank - 2], perm[options.rank - 1]] = [perm[options.rank - 1]!, perm[options.rank - 2]!];
    const bt = this.node('Transpose', [b], { name: `${name}_transposed`, attrs: { perm } });
    const y = this.node('MatMul', [a, bt], { name });
    if (options.alpha === undefined || options.alpha === 1) return y;
    return this.node('Mul', [y, this.constant(options.dtype ?? 'float32', [], [options.alpha])], { name: `${name}_scaled` });
  }

  /** log-softmax over the rows of `x` [N, width], float32:
   *   cpu, cuda: LogSoftmax
   *   webgpu:    x − logSumExp(x) */
  logSoftmax(x: string, width: number, name = 'log_softmax'): string {
    if (this.provider.logSoftmax) return this.node('LogSoftmax', [x], { name, attrs: { axis: 1 } });
    return this.scope(name, () => this.node('Sub', [x, this.logSumExp(x, width).lse], { name: 'logprobs' }));
  }

  /** log Σ exp over the rows of `x` [N, width], float32, as [N, 1], with the rows' maxima:
   *   x ─ReduceMax─► max;  x − max ─Exp─► sum of a row ─Log─+ max─► lse
   * The WebGPU provider's ReduceLogSumExp (like its ReduceMean, rowMean) sums a tensor of
   * one row in another order: over 32,000 to 49,152 logits, 2–4 of 12 rows alone differed
   * from themselves among others (lavapipe), so a token scored alone, or sampled by one
   * stream, was not the bits of the same token in a batch. A maximum is exact in any
   * order; MatMul rows sum alike whatever their number (`rowSum`). */
  logSumExp(x: string, width: number, name = 'log_sum_exp'): { max: string; lse: string } {
    return this.scope(name, () => {
      const max = this.node('ReduceMax', [x, this.ints([1])], { name: 'max', attrs: { keepdims: 1 } });
      const exp = this.node('Exp', [this.node('Sub', [x, max], { name: 'shifted' })], { name: 'exp' });
      const sum = this.rowSum(exp, width);
      return { max, lse: this.node('Add', [this.node('Log', [sum], { name: 'log_sum' }), max], { name: 'lse' }) };
    });
  }

  /** The sum of each row of `x` [N, width] as [N, 1], by MatMuls with columns of ones:
   *   narrow (or no divisor in [256, 2048]): x ─MatMul(ones [width, 1])─►
   *   wide:  x ─Reshape [N, G, C]─MatMul(ones [C, 1])─Reshape [N, G]─MatMul(ones [G, 1])─►
   * The provider's MatMul gives a product of one column one workgroup per 32 rows, which
   * walks the whole width 32 at a time: 1,536 steps in a row over 49,152 logits, each a
   * round trip to memory, in every pass (a decode step too). In chunks of C, each row's
   * chunks run side by side and a step walks C / 32. Rows still sum alike whatever their
   * number: every row is its own batch of the first product and a row of the second. */
  rowSum(x: string, width: number, name = 'sum'): string {
    const ones = (n: number) => this.constant('float32', [n, 1], new Array<number>(n).fill(1));
    let C = 2048;
    while (C >= 256 && width % C !== 0) C--;
    if (width <= 4096 || C < 256) return this.node('MatMul', [x, ones(width)], { name });
    const G = width / C;
    const chunks = this.node('Reshape', [x, this.ints([0, G, C])], { name: `${name}_chunks` });
    const partial = this.node('MatMul', [chunks, ones(C)], { name: `${name}_of_chunks` });
    return this.node('MatMul', [this.node('Reshape', [partial, this.ints([0, G])], { name: `${name}_partials` }), ones(G)], { name });
  }

  /** The index of each row's first maximum over the last axis of `x` (its maxima `max`,
   * kept as an axis of 1), from `ids`, each position's index as float32 (exact below 2^24),
   * int64, the axis kept or not:
   *   x ─Equal(max)─Where(ids, 2^30)─ReduceMin─Cast(int64)─►
   * For WebGPU, whose ArgMax walks a row in one thread and whose TopK sorts the whole row
   * whatever k is: reductions spread a row over a workgroup, and a maximum and a minimum
   * are exact in any order, so this is the index ArgMax and TopK give (the first of equal
   * maxima). */
  firstMaxIndex(x: string, max: string, ids: string, keepdims: boolean, name = 'first_max'): string {
    return this.scope(name, () => {
      const atMax = this.node('Equal', [x, max], { name: 'at_max' });
      const idsAtMax = this.node('Where', [atMax, ids, this.scalar(2 ** 30)], { name: 'ids_at_max' });
      const first = this.node('ReduceMin', [idsAtMax, this.ints([-1])], { name: 'first', attrs: { keepdims: keepdims ? 1 : 0 } });
      return this.cast(first, 'int64', 'float32', 'index');
    });
  }

  /** One-hot float32 over a new last axis of `depth` ([1] int64) for non-negative indices
   * (int64, or on WebGPU `indexType`'s int32: the ids are then int32 too):
   *   cpu, cuda: OneHot(indices, depth, [0, 1])
   *   webgpu:    Cast(Equal(Unsqueeze(indices, -1), Range(0, depth))) */
  oneHot(indices: string, depth: string, name: string, indicesType: 'int64' | 'int32' = 'int64'): string {
    if (this.provider.oneHot)
      return this.node('OneHot', [indices, depth, this.constant('float32', [2], [0, 1])], { name, attrs: { axis: -1 } });
    return this.scope(name, () => {
      const count = this.cast(this.node('Squeeze', [depth, this.ints([0])], { name: 'depth' }), indicesType, 'int64', 'depth_int32');
      const [zero, one] = [0, 1].map((v) => this.constant(indicesType, [], [v])) as [string, string];
      const ids = this.node('Range', [zero, count, one], {
        name: 'ids',
      });
      const hit = this.node('Equal', [this.node('Unsqueeze', [indices, this.ints([-1])], { name: 'indices' }), ids], { name: 'hit' });
      return this.cast(hit, 'float32', 'bool', 'one_hot');
    });
  }

  /** Indices of the non-zero entries of a float32 tensor ([rank, n] int64):
   *   cpu, cuda: NonZero(x)
   *   webgpu:    NonZero(Greater(x, 0)) — the provider has no NonZero, so it runs on the CPU
   *              over a bool (index arithmetic), the comparison on the device */
  nonZero(x: string, name = 'nonzero'): string {
    if (this.provider.floatNonZero) return this.node('NonZero', [x], { name });
    return this.node('NonZero', [this.node('Greater', [x, this.scalar(0)], { name: `${name}_mask` })], { name });
  }

  /** Rows of `updates` added onto zeros of `shape` at `indices` ([n, 1]), in `dtype`:
   *   ScatterND(Expand(0, shape), indices, updates, reduction add)
   *   webgpu, float16: the same in float32 between two Casts (its ScatterND has no float16
   *   reduction: "Reduction is not supported for data type"). */
  scatterAdd(shape: string, indices: string, updates: string, dtype: DTypeName, name = 'combine'): string {
    const wide = !this.provider.float16ScatterAdd && dtype !== 'float32';
    const at = wide ? 'float32' : dtype;
    const zeros = this.node('Expand', [this.cast(this.scalar(0), at, 'float32', 'zero'), shape], { name: 'zeros' });
    const summed = this.node('ScatterND', [zeros, indices, this.cast(updates, at, dtype, `${name}_updates`)], {
      name,
      attrs: { reduction: 'add' },
    });
    return this.cast(summed, dtype, at, `${name}_to_${dtype}`);
  }

  /** The mean over the last axis (of size `width`), kept as an axis of 1:
   *   cpu, cuda: ReduceMean
   *   webgpu:    MatMul with a column of 1/width. The provider's reductions sum a row in an
   *              order that depends on the pass's shape: ReduceMean (and ReduceSum) over a
   *              Qwen3 query head made a sequence scored in a batch differ from itself
   *              alone in 58–70 of 195 log-probs on lavapipe; over a hidden size of 960 to
   *              4096, a tensor of one row (the final norm of a pass that scores one token)
   *              takes a 256-wide workgroup instead of 64 and 8–15 of 40 rows' means moved
   *              by an ulp (scratch runs on lavapipe, 2026-11-27). MatMul rows do not. */
  rowMean(x: string, width: number, name = 'mean'): string {
    if (this.provider.shapeStableReductions) return this.node('ReduceMean', [x, this.ints([-1])], { name, attrs: { keepdims: 1 } });
    return this.node('MatMul', [x, this.constant('float32', [width, 1], new Array<number>(width).fill(1 / width))], { name });
  }

  /** RMSNorm over the last axis (of size `width`), in float32, scaled by `scale()`:
   *   cpu, cuda, and webgpu rows `any`: x ─► Pow(2) ─► rowMean ─► Add(eps) ─► Sqrt ─► Div(x, ·) ─► Mul(scale)
   *     (onnxruntime fuses it into SimplifiedLayerNormalization on the CPU)
   *   webgpu rows `several`: SimplifiedLayerNormalization(x, scale): one node for six, and
   *     on lavapipe half the time at the 360M shape (bench/gpu-kernels.ts) */
  rmsNorm(x: string, scale: () => string, width: number, epsilon: number, rows: NormRows): string {
    if (this.provider.fusedNorms && rows === 'several') {
      return this.node('SimplifiedLayerNormalization', [x, scale()], { name: 'rms_norm', attrs: { axis: -1, epsilon: float(epsilon) } });
    }
    const sq = this.node('Pow', [x, this.scalar(2)], { name: 'square' });
    const rms = this.node('Sqrt', [this.node('Add', [this.rowMean(sq, width, 'mean_square'), this.scalar(epsilon)], { name: 'plus_eps' })], { name: 'rms' });
    const normed = this.node('Div', [x, rms], { name: 'normalized' });
    return this.node('Mul', [normed, scale()], { name: 'scaled' });
  }

  /** Rows of `width` values, the sources' end to end, picked by a flat row index (int32):
   *   source ─Reshape[-1, width]─► its rows ─┐ (rows as they are: no Reshape)
   *   …                                      ─Concat(0)─► pool ─Gather(index)─►
   * Two copies whatever the sources' layouts (a KV layout's pieces; on WebGPU a layer's
   * past, recent and new keys): the index says where each output row lies. */
  gatherRows(sources: { value: string; name: string }[], rows: string[], index: string, width: number): string {
    const flat = sources.map((s) => this.node('Reshape', [s.value, this.ints([-1, width])], { name: s.name }));
    const pool = this.node('Concat', [...flat, ...rows], { name: 'pool', attrs: { axis: 0 } });
    return this.node('Gather', [pool, index], { name: 'gathered', attrs: { axis: 0 } });
  }

  /** x + skip, and its norm over the last axis: onnxruntime's SkipSimplifiedLayerNormalization
   * (rms) or SkipLayerNormalization (layer), which give the sum and the normed sum in one
   * dispatch. For WebGPU, float32, a layer's norms (rows `several`). Their mean and inverse
   * deviation outputs are left unnamed, so not written.
   *   x, skip ─Skip(Simplified)LayerNormalization─► normed, sum */
  skipNorm(kind: 'rms' | 'layer', x: string, skip: string, gamma: string, beta: string | undefined, epsilon: number): { normed: string; sum: string } {
    const op = kind === 'rms' ? 'SkipSimplifiedLayerNormalization' : 'SkipLayerNormalization';
    const outs = this.nodeN(op, kind === 'rms' ? 'skip_rms_norm' : 'skip_layer_norm', kind === 'rms' ? [x, skip, gamma] : [x, skip, gamma, beta!], {
      outputs: 4,
      domain: 'com.microsoft',
      attrs: { epsilon: float(epsilon) },
    });
    const node = this.nodes.at(-1)!;
    node.output = [outs[0]!, '', '', outs[3]!];
    return { normed: outs[0]!, sum: outs[3]! };
  }

  /** LayerNorm over the last axis (of size `width`), in float32:
   *   cpu, cuda, and webgpu rows `several`: LayerNormalization
   *   webgpu rows `any`: x ─Sub(rowMean)─► centred ─Mul(self)─rowMean─Add(eps)─Sqrt─► Div ─Mul(weight)─Add(bias)─►
   *     (GPT-2 medium's final norm, 1024 wide: a token scored alone differed from itself
   *     in a batch with LayerNormalization, on lavapipe) */
  layerNorm(x: string, weight: string, bias: string, width: number, epsilon: number, rows: NormRows): string {
    if (this.provider.shapeStableReductions || rows === 'several') {
      return this.node('LayerNormalization', [x, weight, bias], { attrs: { axis: -1, epsilon: float(epsilon) } });
    }
    const centred = this.node('Sub', [x, this.rowMean(x, width, 'mean')], { name: 'centred' });
    const variance = this.rowMean(this.node('Mul', [centred, centred], { name: 'square' }), width, 'variance');
    const std = this.node('Sqrt', [this.node('Add', [variance, this.scalar(epsilon)], { name: 'plus_eps' })], { name: 'std' });
    const normed = this.node('Div', [centred, std], { name: 'normalized' });
    return this.node('Add', [this.node('Mul', [normed, weight], { name: 'scaled' }), bias], { name: 'shifted' });
  }

  /** Each token's expert outputs summed, its experts in ascending order (as transformers'
   * index_add_ loop adds them). `rows[e]` are expert e's tokens (ascending), `outputs[e]`
   * its weighted outputs, `routed[e]` [N] float32 1 where expert e has the token; every
   * token has `perToken` experts.
   *   cpu, cuda: ScatterND(add) of the concatenated rows onto zeros [N,H]
   *   webgpu:    no ScatterND: its adds are atomics whose order is not fixed (the same
   *              batch scored twice differed with 4 experts a token). Instead, where each
   *              token's j-th expert output lies in the concatenation, from the routing:
   *
   *     routing [N,E] ─CumSum(tokens, exclusive)─► rank in its expert ┐
   *        └─ReduceSum(tokens) [1,E] ─CumSum(exclusive)─► offsets ────┴─Add─► position [N,E]
   *     routing × (E − e) ─TopK(perToken)─► its experts, ascending [N,k]
   *     GatherElements(position, experts) ─Cast int32─► [N,k]
   *     Σ_j Gather(outputs, column j) ─► [N,H], adds in expert order */
  combineExperts(tokens: string, rows: string[], outputs: string[], routed: string[], perToken: number, dtype: DTypeName): string {
    if (this.provider.orderedScatterAdd) {
      const allRows = this.node('Unsqueeze', [this.node('Concat', rows, { name: 'all_rows', attrs: { axis: 0 } }), this.ints([-1])], { name: 'scatter_rows' });
      const allOut = this.node('Concat', outputs, { name: 'all_outputs', attrs: { axis: 0 } });
      return this.scatterAdd(this.node('Shape', [tokens], { name: 'tokens_shape' }), allRows, allOut, dtype);
    }
    const E = routed.length;
    const routing = this.node('Concat', routed.map((r, e) => this.node('Unsqueeze', [r, this.ints([-1])], { name: `routed_${e}` })), { name: 'routing', attrs: { axis: 1 } });
    const rank = this.node('CumSum', [routing, this.int(0)], { name: 'rank_in_expert', attrs: { exclusive: 1 } });
    const counts = this.node('ReduceSum', [routing, this.ints([0])], { name: 'expert_tokens', attrs: { keepdims: 1 } });
    const offsets = this.node('CumSum', [counts, this.int(1)], { name: 'expert_offsets', attrs: { exclusive: 1 } });
    const position = this.node('Add', [rank, offsets], { name: 'position' });
    const descending = this.constant('float32', [E], Array.from({ length: E }, (_, e) => E - e));
    const key = this.node('Mul', [routing, descending], { name: 'expert_key' });
    const [, experts] = this.nodeN('TopK', 'token_experts', [key, this.ints([perToken])], { outputs: 2, attrs: { axis: -1 } }) as [string, string];
    const at = this.cast(this.node('GatherElements', [position, experts], { name: 'output_rows_f32', attrs: { axis: 1 } }), 'int32', 'float32', 'output_rows');
    const all = this.node('Concat', outputs, { name: 'all_outputs', attrs: { axis: 0 } });
    let sum = '';
    for (let j = 0; j < perToken; j++) {
      const column = this.node('Reshape', [this.node('Slice', [at, this.ints([j]), this.ints([j + 1]), this.ints([1])], { name: `expert_${j}_rows_2d` }), this.ints([-1])], {
        name: `expert_${j}_rows`,
      });
      const part = this.node('Gather', [all, column], { name: `expert_${j}_output`, attrs: { axis: 0 } });
      sum = j === 0 ? part : this.node('Add', [sum, part], { name: `sum_${j}` });
    }
    return sum;
  }

  /** float32 zeros of a runtime shape ([rank] int64):
   *   cpu, cuda: ConstantOfShape
   *   webgpu:    Expand(0, shape) */
  zeros(shape: string, name = 'zeros'): string {
    if (this.provider.constantOfShape) return this.node('ConstantOfShape', [shape], { name, attrs: {} });
    return this.node('Expand', [this.scalar(0), shape], { name });
  }

}
