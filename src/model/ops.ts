// The building blocks of a model graph, named by location: linear layers in the family's
// weight layout, norms by role (RMSNorm, Gemma's 1 + w, LayerNorm), activations, soft caps,
// casts between the compute dtype and float32, and the checkpoint's weights (each made
// once). The decoder (decoder.ts) extends this and reads as the model alone.
import { GraphBuilder, type NormRows } from '../graph/builder.js';
import type { StoredWeight } from '../checkpoint/weights.js';
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
export type WeightsAtRest = 'compute' | 'stored';

/** The feed that keeps stored weights from being folded at load: [0, 0] every pass. */
export const KEEP_SHAPE = 'weights_keep_shape';

const BYTES_OF: Partial<Record<DTypeName, number>> = { float32: 4, float16: 2, bfloat16: 2 };

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
    return this.project(x, (shape) => this.weight(`${name}.weight`, shape), bias, inFeatures, outFeatures, label);
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
    if (!target) return quantizedParts(this.g, this.storedName(name), stored, layout);
    // Quantized at load: the float rows are the source, the format's blocks made from them.
    const { values, bytes } = BLOCKS[target];
    const asBlocks = { ggmlType: QUANT_TYPE_IDS[target], typeName: target, dims: [shape[1], shape[0]], blockValues: values, blockBytes: bytes };
    return quantizedParts(this.g, this.storedName(name), { ...stored, quantized: asBlocks }, layout, stored.dtype as 'float32' | 'float16' | 'bfloat16');
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
          y = g.matMulT(x, weight([outFeatures, inFeatures]));
          break;
        case 'in_out':
          y = g.node('MatMul', [x, weight([inFeatures, outFeatures])]);
          break;
        default:
          return unreachable(this.spec.linearLayout);
      }
      if (bias) y = g.node('Add', [y, bias()], { name: 'bias' });
      return y;
    });
  }

  protected readonly weights = new Map<string, string>();

  /** A checkpoint tensor as `as` (default: the compute dtype; a Cast ORT folds at load
   * when the stored dtype differs, or that runs each pass for a matrix kept as stored:
   * WeightsAtRest). The initializer is made once per tensor. */
  protected weight(name: string, shape: number[], as: DTypeName = this.dt): string {
    const key = `${name}:${as}`;
    const known = this.weights.get(key);
    if (known) return known;
    const { init, dtype } = this.storedWeight(name, shape);
    const kept = this.atRest === 'stored' && shape.length === 2 && dtype !== as;
    const value = this.g.cast(kept ? this.unfolded(init) : init, as, dtype, 'weight_cast');
    this.weights.set(key, value);
    return value;
  }

  /** A [rows, width] checkpoint matrix as `as`, whole, or in blocks of rows where it is
   * larger than the provider's kernels take (providers.ts maxTensorBytes): each block its
   * own initializer, the stored bytes of its rows read in place. */
  protected weightRows(name: string, shape: [number, number], as: DTypeName = this.dt): { value: string; start: number; end: number }[] {
    const limit = this.g.provider.maxTensorBytes;
    const [rows, width] = shape;
    const size = BYTES_OF[as] ?? 4;
    const bytes = rows * width * size;
    if (limit === undefined || bytes <= limit) return [{ value: this.weight(name, shape, as), start: 0, end: rows }];
    const stored = this.source.get(this.storedName(name), shape);
    const per = Math.max(1, Math.floor(limit / (width * size)));
    const rowBytes = stored.length / rows;
    const blocks: { value: string; start: number; end: number }[] = [];
    for (let start = 0; start < rows; start += per) {
      const end = Math.min(rows, start + per);
      const key = `${name}:rows.${start}:${as}`;
      let value = this.weights.get(key);
      if (!value) {
        const init = this.g.external(`${name}.rows.${start}`, { ...stored, shape: [end - start, width], offset: stored.offset + start * rowBytes, length: (end - start) * rowBytes });
        value = this.g.cast(init, as, stored.dtype, 'weight_cast');
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
  private unfolded(w: string): string {
    const keep = this.g.hasInput(KEEP_SHAPE) ? KEEP_SHAPE : this.g.input(KEEP_SHAPE, 'int64', [2]);
    return this.g.node('Reshape', [w, keep], { name: 'weight_as_stored' });
  }

  // A stored weight as the Hugging Face tensor: referenced in place, its rows put back in
  // order when the file permuted them (llama.cpp's q/k rows), by a Gather of the
  // initializer that onnxruntime folds at load into a rewritten copy (no cost per pass):
  //   stored ─Gather(rows, axis 0)─► weight
  private stored(name: string, stored: StoredWeight): string {
    const { g } = this;
    if (stored.quantized)
      throw new CheckpointError(`${name}: a ${stored.quantized.typeName} tensor where the graph needs float values (quantized tensors are read as matrices of products and embeddings)`);
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

