// The building blocks of a model graph, named by location: linear layers in the family's
// weight layout, norms by role (RMSNorm, Gemma's 1 + w, LayerNorm), activations, soft caps,
// casts between the compute dtype and float32, and the checkpoint's weights (each made
// once). The decoder (decoder.ts) extends this and reads as the model alone.
import { GraphBuilder, type NormRows } from '../graph/builder.js';
import { storedName, type StoredWeight } from '../checkpoint/weights.js';
import { CheckpointError } from '../common/errors.js';
import { kvDType, type ComputeDType, type DTypeName } from '../common/dtypes.js';
import type { ModelConfig } from './families.js';
import type { ProviderKind } from '../common/providers.js';
import { unreachable } from '../common/unreachable.js';
import { quantizeTarget, quantizedParts, quantizedProduct, type QuantizeAtLoad, type QuantizedActivations, type QuantizedParts } from './quantized.js';
import { BLOCKS, QUANT_TYPE_IDS } from '../checkpoint/ggml-blocks.js';

/** Where the decoder gets its weights: a checkpoint, or a recorder (synthetic.ts). */
export interface WeightSource {
  /** The folder external initializers are resolved against. */
  readonly weightsDir: string;
  get(name: string, shape: number[]): StoredWeight;
  has(name: string): boolean;
}

/** How weights stored in a narrower float than the compute dtype (BF16, F16 checkpoints
 * computed in float32) lie in memory between passes:
 * - `compute`: widened once, at load (onnxruntime folds each Cast into a float32
 *   initializer): twice the checkpoint's bytes at rest, nothing per pass;
 * - `stored`: as the checkpoint stores them, each matrix widened for its product every pass
 *   (exact: bfloat16 and float16 widen to float32 without rounding) and the embedding's rows
 *   after they are gathered: the checkpoint's bytes at rest, a cast of every matrix a pass.
 *   The Cast reads its weight through a Reshape whose shape is a feed (`weights_keep_shape`,
 *   [0, 0]: every dim as it is), so onnxruntime cannot fold it at load. */
export const WEIGHTS_AT_REST = ['stored', 'compute'] as const;
export type WeightsAtRest = (typeof WEIGHTS_AT_REST)[number];

/** The feed that keeps stored weights from being folded at load: [0, 0] every pass. */
export const KEEP_SHAPE = 'weights_keep_shape';

const BYTES_OF: Partial<Record<DTypeName, number>> = { float32: 4, float16: 2, bfloat16: 2 };

/** Every bfloat16 value as float32, by its 16 bits (made on first use). */
let bfloat16Values: Float32Array | undefined;
const BFLOAT16_VALUES = () =>
  (bfloat16Values ??= new Float32Array(Uint32Array.from({ length: 65536 }, (_, i) => i * 65536).buffer));

export class ModelOps {
  readonly g: GraphBuilder;
  protected readonly spec: ModelConfig['spec'];
  /** Set before building: how narrow stored weights lie at rest (WeightsAtRest). */
  atRest: WeightsAtRest = 'compute';
  /** Set before building: what quantized products take (quantized.ts). */
  quantizedActivations: QuantizedActivations = 'float32';
  /** Set before building: float matrices quantized at load to this format (`--quantize`). */
  quantizeAtLoad?: QuantizeAtLoad;

  constructor(
    protected readonly c: ModelConfig,
    protected readonly source: WeightSource,
    protected readonly dt: ComputeDType,
    provider: ProviderKind = 'cpu',
  ) {
    this.spec = c.spec;
    this.g = new GraphBuilder(provider);
  }

  protected activation(x: string): string {
    const { g } = this;
    switch (this.c.activation) {
      case 'silu':
        return g.node('Mul', [x, g.node('Sigmoid', [x], { name: 'sigmoid' })], { name: 'silu' });
      case 'gelu_tanh':
        return g.node('Gelu', [x], { name: 'gelu_tanh', attrs: { approximate: 'tanh' } });
      case 'gelu':
        return g.node('Gelu', [x], { name: 'gelu' });
      default:
        return unreachable(this.c.activation);
    }
  }

  // Gemma's soft-capping, in float32: x ─Div(cap)─► Tanh ─Mul(cap)─► cap·tanh(x/cap)
  protected softcap(x: string, cap: number | undefined, name: string): string {
    if (cap === undefined) return x;
    const { g } = this;
    return g.scope(name, () =>
      g.node('Mul', [g.node('Tanh', [g.node('Div', [x, g.scalar(cap)], { name: 'scaled' })], { name: 'tanh' }), g.scalar(cap)], { name: 'capped' }),
    );
  }

  // Over the last axis, of size `dim`, in float32, by the builder's rmsNorm / layerNorm
  // (their WebGPU forms give a row the same bits whatever the pass's shape); `rows`: a
  // layer's norm sees several rows, the final norm any number (NormRows).
  protected norm(x: string, name: string, dim: number, rows: NormRows = 'several'): string {
    const { g, c } = this;
    const weight = this.weight(`${name}.weight`, [dim], 'float32');
    const x32 = this.toFloat32(x);
    switch (this.spec.norm) {
      case 'layer':
        return this.fromFloat32(g.layerNorm(x32, weight, this.weight(`${name}.bias`, [dim], 'float32'), dim, c.normEps, rows));
      case 'rms':
      case 'rmsOffset':
        return this.fromFloat32(g.rmsNorm(x32, () => this.rmsScale(weight), dim, c.normEps, rows));
      default:
        return unreachable(this.spec.norm);
    }
  }

  // What an RMS norm scales by: its float32 weight w, or Gemma's (1 + w), added in float32
  // before the cast back (transformers' #29402).
  protected rmsScale(weight: string, name = 'one_plus_weight'): string {
    return this.spec.norm === 'rmsOffset' ? this.g.node('Add', [weight, this.g.scalar(1)], { name }) : weight;
  }

  // x + skip and its norm (as `norm`, rows `several`) in one node: WebGPU, float32 only.
  protected skipNorm(x: string, skip: string, name: string, dim: number): { normed: string; sum: string } {
    const { g, c } = this;
    const weight = this.weight(`${name}.weight`, [dim], 'float32');
    switch (this.spec.norm) {
      case 'layer':
        return g.skipNorm('layer', x, skip, weight, this.weight(`${name}.bias`, [dim], 'float32'), c.normEps);
      case 'rms':
      case 'rmsOffset':
        return g.skipNorm('rms', x, skip, this.rmsScale(weight), undefined, c.normEps);
      default:
        return unreachable(this.spec.norm);
    }
  }

  //   x ─► x·Wᵀ (builder's matMulT, or quantized.ts's product of a quantized W) or MatMul(W) for Conv1D ─► (+ bias)
  protected linear(name: string, x: string, inFeatures: number, outFeatures: number, withBias: boolean, label: string): string {
    const bias = withBias ? () => this.weight(`${name}.bias`, [outFeatures]) : undefined;
    // A router stays float32 under --quantize, as llama.cpp keeps ffn_gate_inp.
    const quantized = this.quantizedParts(`${name}.weight`, [outFeatures, inFeatures], 'product', label !== 'router');
    if (quantized)
      return this.g.scope(label, () => {
        const y = quantizedProduct(this.g, x, quantized, this.quantizedActivations);
        return bias ? this.g.node('Add', [y, bias()], { name: 'bias' }) : y;
      });
    // A matrix widened per pass in row blocks (weightRows): each block its own product.
    if (this.spec.linearLayout === 'out_in' && this.widensInBlocks(`${name}.weight`, [outFeatures, inFeatures]))
      return this.g.scope(label, () => {
        const blocks = this.orderedAfter(x, () => this.weightRows(`${name}.weight`, [outFeatures, inFeatures]));
        const y = this.g.node('Concat', blocks.map((b, k) => this.g.matMulT(x, b.value, { rank: 2, name: `block_${k}` })), { name: 'blocks', attrs: { axis: -1 } });
        return bias ? this.g.node('Add', [y, bias()], { name: 'bias' }) : y;
      });
    return this.project(x, (shape) => this.weight(`${name}.weight`, shape), bias, inFeatures, outFeatures, label);
  }

  /** Whether a [rows, cols] matrix kept as stored is larger widened than the provider's
   * maxWidenedBytes, and so widened in row blocks (weightRows). */
  private widensInBlocks(name: string, shape: [number, number]): boolean {
    const limit = this.g.provider.maxWidenedBytes;
    if (limit === undefined || this.atRest !== 'stored') return false;
    const stored = this.source.get(this.storedName(name), shape);
    return !stored.quantized && stored.dtype !== this.dt && shape[0] * shape[1] * (BYTES_OF[this.dt] ?? 4) > limit;
  }

  /** A weight stored quantized ([out, in], blocks along in) as its exact form's parts
   * (quantized.ts); undefined for a float weight. Quantized products take float32 activations. */
  protected quantizedParts(name: string, shape: [number, number], layout: 'product' | 'rows', quantizable = true): QuantizedParts | undefined {
    if (this.spec.linearLayout !== 'out_in' && layout === 'product') return undefined;
    const stored = this.source.get(this.storedName(name), shape);
    const target = !stored.quantized && quantizable && this.quantizeAtLoad ? quantizeTarget(this.quantizeAtLoad, shape[1]) : undefined;
    if (!stored.quantized && !target) return undefined;
    if (this.dt !== 'float32')
      throw new CheckpointError(`${name}: quantized weights compute in float32 (the model was asked for ${this.dt}): use --dtype float32`);
    // On int8 activations a format of more than 4 bits is one 8-bit product where the provider has it.
    const laid = layout === 'product' && this.quantizedActivations === 'int8' && this.g.provider.wideQuantizedProducts ? 'wideProduct' : layout;
    if (!target) return quantizedParts(this.g, this.storedName(name), stored, laid);
    // Quantized at load: the float rows are the source, the format's blocks made from them.
    const { values, bytes } = BLOCKS[target];
    const asBlocks = { ggmlType: QUANT_TYPE_IDS[target], typeName: target, dims: [shape[1], shape[0]], blockValues: values, blockBytes: bytes };
    return quantizedParts(this.g, this.storedName(name), { ...stored, quantized: asBlocks }, laid, stored.dtype as 'float32' | 'float16' | 'bfloat16');
  }

  // `linear` of a weight made by `weight` for the checkpoint's layout ([out, in], or [in,
  // out] for Conv1D), and of the bias `bias` makes (after the product), if any.
  protected project(
    x: string,
    weight: (shape: number[]) => string,
    bias: (() => string) | undefined,
    inFeatures: number,
    outFeatures: number,
    label: string,
  ): string {
    const { g } = this;
    return g.scope(label, () => {
      let y: string;
      switch (this.spec.linearLayout) {
        case 'out_in':
          y = g.matMulT(x, this.orderedAfter(x, () => weight([outFeatures, inFeatures])));
          break;
        case 'in_out':
          y = g.node('MatMul', [x, this.orderedAfter(x, () => weight([inFeatures, outFeatures]))]);
          break;
        default:
          return unreachable(this.spec.linearLayout);
      }
      if (bias) y = g.node('Add', [y, bias()], { name: 'bias' });
      return y;
    });
  }

  protected readonly weights = new Map<string, string>();

  /** The input of the product whose weights are being made (project, the head): where the
   * provider orders by shapes, a weight kept as stored is widened only once that input is
   * made (unfolded). Without it onnxruntime may widen every weight at the start of a pass,
   * and on WebGPU a pass then holds the whole model widened (lavapipe, a 0.4 GiB BF16
   * model: 1.9 GiB more during a pass; an 8B one was killed by the kernel). */
  private widenAfter: string | undefined;

  /** What `make` makes, its weights kept as stored widened only once `x` is made (widenAfter). */
  protected orderedAfter<T>(x: string, make: () => T): T {
    const before = this.widenAfter;
    this.widenAfter = x;
    try {
      return make();
    } finally {
      this.widenAfter = before;
    }
  }

  /** A checkpoint tensor as `as` (default: the compute dtype; a Cast ORT folds at load
   * when the stored dtype differs, or that runs each pass for a matrix kept as stored:
   * WeightsAtRest). The initializer is made once per tensor. */
  protected weight(name: string, shape: number[], as: DTypeName = this.dt): string {
    const key = `${name}:${as}`;
    const known = this.weights.get(key);
    if (known) return known;
    const stored = this.source.get(this.storedName(name), shape);
    const kept = this.atRest === 'stored' && shape.length === 2 && stored.dtype !== as;
    let value: string;
    if (kept && this.asPairs(stored.dtype)) {
      value = this.widenPairs(this.unfolded(this.storedPairs(name, shape)), shape[1]!, as);
    } else {
      const { init, dtype } = this.storedWeight(name, shape);
      value = this.g.cast(kept ? this.unfolded(init) : init, as, dtype, 'weight_cast');
    }
    this.weights.set(key, value);
    return value;
  }

  /** A [rows, width] table kept as stored, for its rows to be gathered as stored and then
   * widened to `as`: its initializers (in row blocks where the stored table is larger than
   * the provider's kernels take) and the widening; undefined where it is not kept as stored. */
  protected keptTable(name: string, shape: [number, number], as: DTypeName = this.dt): { blocks: { value: string; start: number; end: number }[]; widen: (rows: string) => string } | undefined {
    if (this.atRest !== 'stored') return undefined;
    const { g } = this;
    const stored = this.source.get(this.storedName(name), shape);
    if (stored.dtype === as || stored.quantized) return undefined;
    const [rows, width] = shape;
    if (!this.asPairs(stored.dtype))
      return { blocks: [{ value: this.storedWeight(name, shape).init, start: 0, end: rows }], widen: (x) => g.cast(x, as, stored.dtype, 'rows_cast') };
    const limit = g.provider.maxTensorBytes;
    const per = limit === undefined || stored.length <= limit ? rows : Math.max(1, Math.floor(limit / (stored.length / rows)));
    const blocks = [];
    for (let start = 0; start < rows; start += per) {
      const end = Math.min(rows, start + per);
      blocks.push({ value: this.storedPairs(name, shape, per === rows ? undefined : { start, end }), start, end });
    }
    return { blocks, widen: (x) => this.widenPairs(x, width, as, 3) };
  }

  /** Whether bfloat16 weights kept as stored are read as pairs (`storedPairs`): on a provider
   * without a bfloat16 type (WebGPU). */
  private asPairs(dtype: DTypeName): boolean {
    return dtype === 'bfloat16' && !this.g.provider.castsBfloat16;
  }

  /** A bfloat16 [rows, width] matrix as uint32 [rows, width / 2], the same bytes: each
   * element two weights, the even column's in its low half (little-endian). Made once. */
  private storedPairs(name: string, shape: number[], rows?: { start: number; end: number }): string {
    const key = rows ? `${name}:pairs.${rows.start}.${rows.end}` : `${name}:pairs`;
    const known = this.weights.get(key);
    if (known) return known;
    const stored = this.source.get(this.storedName(name), shape);
    const [total, width] = shape as [number, number];
    if (width % 2 !== 0)
      throw new CheckpointError(`${name}: a bfloat16 matrix of odd width ${width} cannot be kept as stored on this device (it reads the weights in pairs): use --weights-at-rest compute`);
    const rowBytes = stored.length / total;
    const [start, end] = rows ? [rows.start, rows.end] : [0, total];
    const pairs = { ...stored, dtype: 'uint32' as const, shape: [end - start, width / 2], offset: stored.offset + start * rowBytes, length: (end - start) * rowBytes };
    const init = rows ? this.g.external(`${name}.pairs.${start}.${end}`, pairs) : this.stored(name, pairs);
    this.weights.set(key, init);
    return init;
  }

  // bfloat16 weights in pairs (storedPairs) as float32, exactly: each half's 16 bits index
  // a table of the 65,536 bfloat16 values (a bfloat16 is the high half of its float32).
  //   pairs ─Div(65536)──────────► high halves ─Cast(int32)─Gather(values)─► odd columns ─┐
  //   pairs ─Sub(high × 65536)───► low halves ──Cast(int32)─Gather(values)─► even columns ┴Concat(pairs)─Reshape─►
  private widenPairs(pairs: string, width: number, as: DTypeName, rank = 2): string {
    const { g } = this;
    return g.scope('widened', () => {
      const values = g.namedConstant('/model/constants/bfloat16_values', 'float32', [65536], BFLOAT16_VALUES());
      const half = g.constant('uint32', [], [65536]);
      const high = g.node('Div', [pairs, half], { name: 'high' });
      const low = g.node('Sub', [pairs, g.node('Mul', [high, half], { name: 'high_shifted' })], { name: 'low' });
      const column = (h: string, name: string) =>
        g.node('Unsqueeze', [g.node('Gather', [values, g.cast(h, 'int32', 'uint32', `${name}_index`)], { name, attrs: { axis: 0 } }), g.ints([-1])], { name: `${name}_pair` });
      const both = g.node('Concat', [column(low, 'even'), column(high, 'odd')], { name: 'pairs', attrs: { axis: -1 } });
      const shape = [...Array.from({ length: rank - 1 }, () => 0), width];
      return g.cast(g.node('Reshape', [both, g.ints(shape)], { name: 'columns' }), as, 'float32', 'weight_cast');
    });
  }

  /** A [rows, width] checkpoint matrix as `as`, whole, or in blocks of rows where it is
   * larger than the provider's kernels take (providers.ts maxTensorBytes) or, kept as stored,
   * than it widens per pass (maxWidenedBytes): each block its own initializer, the stored
   * bytes of its rows read in place. */
  protected weightRows(name: string, shape: [number, number], as: DTypeName = this.dt): { value: string; start: number; end: number }[] {
    const [rows, width] = shape;
    const size = BYTES_OF[as] ?? 4;
    const bytes = rows * width * size;
    const stored = this.source.get(this.storedName(name), shape);
    const { maxTensorBytes, maxWidenedBytes } = this.g.provider;
    const widened = this.atRest === 'stored' && stored.dtype !== as && maxWidenedBytes !== undefined;
    const limit = widened ? Math.min(maxTensorBytes ?? Infinity, maxWidenedBytes) : maxTensorBytes;
    if (limit === undefined || bytes <= limit) return [{ value: this.weight(name, shape, as), start: 0, end: rows }];
    const per = Math.max(1, Math.floor(limit / (width * size)));
    const rowBytes = stored.length / rows;
    const blocks: { value: string; start: number; end: number }[] = [];
    for (let start = 0; start < rows; start += per) {
      const end = Math.min(rows, start + per);
      const key = `${name}:rows.${start}:${as}`;
      let value = this.weights.get(key);
      if (!value) {
        const kept = this.atRest === 'stored' && stored.dtype !== as;
        if (kept && this.asPairs(stored.dtype)) {
          value = this.widenPairs(this.unfolded(this.storedPairs(name, shape, { start, end })), width, as);
        } else {
          const init = this.g.external(`${name}.rows.${start}`, { ...stored, shape: [end - start, width], offset: stored.offset + start * rowBytes, length: (end - start) * rowBytes });
          value = this.g.cast(kept ? this.unfolded(init) : init, as, stored.dtype, 'weight_cast');
        }
        this.weights.set(key, value);
      }
      blocks.push({ value, start, end });
    }
    return blocks;
  }

  /** A checkpoint tensor as it is stored: its initializer (made once) and dtype. */
  protected storedWeight(name: string, shape: number[]): { init: string; dtype: DTypeName } {
    const stored = this.source.get(this.storedName(name), shape);
    let init = this.weights.get(`${name}:stored`);
    if (!init) {
      init = this.stored(name, stored);
      this.weights.set(`${name}:stored`, init);
    }
    return { init, dtype: stored.dtype };
  }

  //   W ─Reshape(weights_keep_shape = [0, 0])─► W: the same tensor, not a constant to fold
  // and, where the provider orders by shapes and a product's input is known (widenAfter),
  // made only once that input is (its Shape: the host's arithmetic, no dispatch):
  //   x ─Shape[0:1]─Mul(0)─► [0] ─Concat ×2─► [0, 0] ─┐
  //   W ─Reshape──────────────────────────────────────┴─► W
  private unfolded(w: string): string {
    const { g } = this;
    const after = g.provider.orderByShapes ? this.widenAfter : undefined;
    if (after) {
      const zero = g.node('Mul', [g.node('Shape', [after], { name: 'widen_after', attrs: { start: 0, end: 1 } }), g.ints([0])], { name: 'widen_after_zero' });
      return g.node('Reshape', [w, g.node('Concat', [zero, zero], { name: 'widen_after_shape', attrs: { axis: 0 } })], { name: 'weight_as_stored' });
    }
    const keep = g.hasInput(KEEP_SHAPE) ? KEEP_SHAPE : g.input(KEEP_SHAPE, 'int64', [2]);
    return g.node('Reshape', [w, keep], { name: 'weight_as_stored' });
  }

  // A stored weight as the Hugging Face tensor: referenced in place, its rows put back in
  // order when the file permuted them (llama.cpp's q/k rows), by a Gather of the
  // initializer that onnxruntime folds at load into a rewritten copy (no cost per pass):
  //   stored ─Gather(rows, axis 0)─► weight
  private stored(name: string, stored: StoredWeight): string {
    const { g } = this;
    if (stored.quantized)
      throw new CheckpointError(`${storedName(name, stored)}: a ${stored.quantized.typeName} tensor where the graph needs float values (quantized tensors are read as matrices of products and embeddings)`);
    const init = g.external(name, stored);
    const rows = stored.rowOrder;
    if (!rows) return init;
    const order = g.namedConstant(`/model/constants/row_order/${rows.key}`, 'int64', [rows.order.length], rows.order);
    return g.node('Gather', [init, order], { name: `${name}/rows_in_order`, attrs: { axis: 0 } });
  }

  /** The name the checkpoint uses for a weight: the spec's, or one of its alternatives. */
  protected storedName(name: string): string {
    if (this.source.has(name)) return name;
    return this.spec.alternativeNames?.(name).find((n) => this.source.has(n)) ?? name;
  }

  protected kvIn(x: string): string {
    return this.g.cast(x, this.dt, kvDType(this.dt), 'kv_to_compute');
  }

  protected kvOut(x: string): string {
    return this.g.cast(x, kvDType(this.dt), this.dt, 'kv_to_io');
  }

  // Norms, softmax and log-softmax run in float32 whatever the compute dtype.
  protected toFloat32(x: string): string {
    return this.g.cast(x, 'float32', this.dt, 'to_f32');
  }

  protected fromFloat32(x: string): string {
    return this.g.cast(x, this.dt, 'float32', 'to_compute');
  }
}

