// A small ONNX graph builder over onnx-proto.
//
// Nodes are named by where they live (`/model/layers.3/attn/q_proj/MatMul`), in the
// style of onnxruntime-genai's model builder, so a profile or a Netron view of the
// graph reads like the model code that emitted it. Checkpoint weights enter the graph
// as external initializers that point into the safetensors files: they are never
// copied into the model proto.
//
// Small constants are named once, globally and by value, as onnxruntime-genai's model
// builder does (`/model/constants/INT64/[-1, 512]`, `/model/constants/FLOAT/0.5`): the
// same value is one initializer wherever it is used.
import onnxProto from 'onnx-proto';
import { ONNX_DTYPE, ONNX_DTYPE_LABEL, f32ToF16, type DTypeName } from '../common/dtypes.js';
import { INDEX_FEEDS, INDEX_FEED_SIZES, sizeInput, type IndexFeed, type IndexFeedPlan } from './index-feeds.js';

const { onnx } = onnxProto;

/** A float attribute that happens to be a whole number (alpha=1.0) must say so. */
export class FloatAttr {
  constructor(readonly value: number) {}
}
export const float = (value: number) => new FloatAttr(value);

export type AttrValue = number | FloatAttr | string | number[] | FloatAttr[];

/** Where one weight lives inside a file of the checkpoint directory. */
export interface ExternalTensor {
  dtype: DTypeName;
  shape: number[];
  /** File name relative to the weights folder (ORT refuses absolute and `../` paths). */
  location: string;
  offset: number;
  length: number;
}

/** Which execution provider a graph is built for. The decoder is one; where a provider
 * lacks a kernel, the builder emits an equivalent it has (`matMulT`, `logSoftmax`,
 * `oneHot`, `zeros`), so no float node falls back to the CPU provider unseen: onnxruntime's
 * WebGPU provider (1.30) has no `FusedMatMul`, float32 `LogSoftmax`, `OneHot` or
 * `ConstantOfShape` kernel and runs those on the CPU without a word (measured on lavapipe:
 * 33 products, the log-softmax and 5 one-hots of the default model's graph). */
export type GraphTarget = 'cpu' | 'cuda' | 'webgpu';

export interface NodeOptions {
  attrs?: Record<string, AttrValue>;
  domain?: string;
  outputs?: number;
}

/** Which rows a norm may see: `several` (a layer's: B·T ≥ 4 on WebGPU, where the engine
 * rounds every pass's query slots up to four) or `any` (the final norm, over the scored
 * positions: one when a pass scores one token). The WebGPU provider's fused norms give a
 * row the same bits whatever the number of rows from two up (lavapipe, 128–5120 features,
 * rows of 2, 4, 5 and 40 against 1,024); a tensor of one row takes another kernel when its
 * width is a multiple of 512, and its bits move (LayerNormalization at 1024,
 * SimplifiedLayerNormalization at 3072). */
export type NormRows = 'several' | 'any';

export class GraphBuilder {
  private nodes: InstanceType<typeof onnx.NodeProto>[] = [];
  private readonly initializers: InstanceType<typeof onnx.TensorProto>[] = [];
  private readonly inputs: InstanceType<typeof onnx.ValueInfoProto>[] = [];
  private readonly outputs: InstanceType<typeof onnx.ValueInfoProto>[] = [];
  private readonly scopeStack: string[] = [];
  private readonly usedNames = new Set<string>();
  private readonly constants = new Set<string>();
  /** Values renamed to the graph output they became (`output`): later uses follow. */
  private readonly renamed = new Map<string, string>();
  /** WebGPU: the integer feeds that travel in `index_feeds`, and the dims read as `size.*`. */
  private readonly indexFeeds: IndexFeed[] = [];
  private readonly sizes: string[] = [];

  constructor(readonly target: GraphTarget = 'cpu') {}

  /** Run `body` with node names prefixed by `/part` (e.g. scope('layers.3', …)). */
  scope<T>(part: string, body: () => T): T {
    this.scopeStack.push(part);
    try {
      return body();
    } finally {
      this.scopeStack.pop();
    }
  }

  private qualified(name: string): string {
    const base = '/' + [...this.scopeStack, name].join('/');
    let unique = base;
    for (let k = 1; this.usedNames.has(unique); k++) unique = `${base}_${k}`;
    this.usedNames.add(unique);
    return unique;
  }

  /** Emit one node; returns its output value names (`<node name>/output_<i>`). */
  nodeN(opType: string, name: string, inputs: string[], options: NodeOptions = {}): string[] {
    const nodeName = this.qualified(name);
    const outputs = Array.from({ length: options.outputs ?? 1 }, (_, i) => `${nodeName}/output_${i}`);
    this.nodes.push(
      onnx.NodeProto.create({
        name: nodeName,
        opType,
        domain: options.domain ?? '',
        input: inputs.map((v) => this.renamed.get(v) ?? v),
        output: outputs,
        attribute: Object.entries(options.attrs ?? {}).map(([key, value]) => makeAttr(key, value)),
      }),
    );
    return outputs;
  }

  /** An `If` node: each branch is a body whose nodes form its subgraph (values of the
   * enclosing graph are in scope; constants stay global). Returns the node's outputs.
   *   cond ─If─┬─ then: body ─► outputs
   *            └─ else: body ─► outputs */
  ifNode(
    name: string,
    cond: string,
    branches: { then: () => string[]; else: () => string[] },
    outputs: { dtype: DTypeName; dims: (number | string)[] }[],
  ): string[] {
    const nodeName = this.qualified(name);
    const branch = (which: 'then' | 'else', body: () => string[]) => {
      const enclosing = this.nodes;
      this.nodes = [];
      try {
        const values = this.scope(`${name}_${which}`, body);
        if (values.length !== outputs.length)
          throw new Error(`${nodeName}: ${which} branch gives ${values.length} outputs, not ${outputs.length}`);
        const names = values.map((v, i) => this.node('Identity', [v], { name: `output_${i}` }));
        return onnx.GraphProto.create({
          name: `${nodeName}/${which}`,
          node: this.nodes,
          output: names.map((n, i) => valueInfo(n, outputs[i]!.dtype, outputs[i]!.dims)),
        });
      } finally {
        this.nodes = enclosing;
      }
    };
    const T = onnx.AttributeProto.AttributeType;
    const thenBranch = branch('then', branches.then);
    const elseBranch = branch('else', branches.else);
    const outs = outputs.map((_, i) => `${nodeName}/output_${i}`);
    this.nodes.push(
      onnx.NodeProto.create({
        name: nodeName,
        opType: 'If',
        input: [cond],
        output: outs,
        attribute: [
          { name: 'then_branch', type: T.GRAPH, g: thenBranch },
          { name: 'else_branch', type: T.GRAPH, g: elseBranch },
        ],
      }),
    );
    return outs;
  }

  /** Emit one single-output node; `name` defaults to the op type. */
  node(opType: string, inputs: string[], options: NodeOptions & { name?: string } = {}): string {
    return this.nodeN(opType, options.name ?? opType, inputs, options)[0]!;
  }

  input(name: string, dtype: DTypeName, dims: (number | string)[]): string {
    this.inputs.push(valueInfo(name, dtype, dims));
    return name;
  }

  /** The element type of index values (ids, positions, rows) in this graph: int64, or on
   * WebGPU int32, which its kernels compute in (index-feeds.ts). */
  get indexType(): 'int32' | 'int64' {
    return this.target === 'webgpu' ? 'int32' : 'int64';
  }

  /** An integer feed of a pass, in `indexType`: an int64 input, or on WebGPU a piece of the
   * one int32 input `index_feeds` (its nodes are made at `encode`). */
  indexInput(name: string, dims: (number | string)[]): string {
    if (this.target !== 'webgpu') return this.input(name, 'int64', dims);
    this.indexFeeds.push({ name, dims });
    return `/model/index_feeds/${name}`;
  }

  /** A scalar constant in `indexType`. */
  index(value: number): string {
    return this.constant(this.indexType, [], [value]);
  }

  /** The size of named dim `dim` of the index feeds, int64 [1] on the host, on WebGPU (a
   * Reshape's shape, a Slice's end): an input of its own, where a Shape of a device tensor
   * would run on the CPU and wait for the device. */
  size(dim: string): string {
    if (this.target !== 'webgpu') throw new Error(`size(${dim}): a WebGPU graph's`);
    const name = sizeInput(dim);
    if (!this.sizes.includes(dim)) {
      this.sizes.push(dim);
      this.input(name, 'int64', [1]);
    }
    return name;
  }

  /** What `index_feeds` carries (empty off WebGPU, or with no index feeds). */
  get indexFeedPlan(): IndexFeedPlan {
    return { feeds: this.indexFeeds.map((f) => ({ ...f, dims: [...f.dims] })), sizes: [...this.sizes] };
  }

  //   index_feeds ─Split(index_feed_sizes)─► each feed (─Reshape(Concat(size.*))─► its rank)
  private emitIndexFeeds(): void {
    if (this.indexFeeds.length === 0 || this.inputs.some((i) => i.name === INDEX_FEEDS)) return;
    const enclosing = this.nodes;
    this.nodes = [];
    this.scope('model/index_feeds', () => {
      const total = this.input(INDEX_FEEDS, 'int32', ['index_feed_length']);
      const sizes = this.input(INDEX_FEED_SIZES, 'int64', [this.indexFeeds.length]);
      const split = this.nodeN('Split', 'split', [total, sizes], { outputs: this.indexFeeds.length, attrs: { axis: 0 } });
      const splitNode = this.nodes.at(-1)!;
      const shapes = new Map<string, string>();
      this.indexFeeds.forEach((f, i) => {
        const value = `/model/index_feeds/${f.name}`;
        if (f.dims.length === 1) {
          splitNode.output[i] = value;
          return;
        }
        const key = f.dims.join(',');
        let shape = shapes.get(key);
        if (!shape) {
          const parts = f.dims.map((d) => (typeof d === 'number' ? this.ints([d]) : this.size(d)));
          shape = this.node('Concat', parts, { name: `shape_${f.dims.join('_')}`, attrs: { axis: 0 } });
          shapes.set(key, shape);
        }
        this.nodes.push(onnx.NodeProto.create({ name: value, opType: 'Reshape', input: [split[i]!, shape], output: [value] }));
      });
    });
    this.nodes = [...this.nodes, ...enclosing];
  }

  /** Declare `value` a graph output under `name`. A node's value is renamed in place (its
   * consumers follow): an Identity would copy it on every run whether or not anyone
   * fetches it (measured: 6.8 of a 40 ms decode step with a 1900-token past went to
   * copying the present KV into outputs). Inputs, initializers and values that are
   * already outputs get an Identity. */
  output(name: string, value: string, dtype: DTypeName, dims: (number | string)[]): void {
    const producer = this.nodes.find((n) => n.output.includes(value));
    if (producer && !this.outputs.some((o) => o.name === value)) {
      producer.output = producer.output.map((o) => (o === value ? name : o));
      // Consumers so far, in subgraphs too (an If's branches read enclosing values by name).
      const follow = (nodes: InstanceType<typeof onnx.NodeProto>[]) => {
        for (const n of nodes) {
          n.input = n.input.map((i) => (i === value ? name : i));
          for (const a of n.attribute) if (a.g) follow(a.g.node as InstanceType<typeof onnx.NodeProto>[]);
        }
      };
      follow(this.nodes);
      this.renamed.set(value, name);
    } else {
      this.nodes.push(
        onnx.NodeProto.create({ name: `/outputs/${name}`, opType: 'Identity', input: [this.renamed.get(value) ?? value], output: [name] }),
      );
    }
    this.outputs.push(valueInfo(name, dtype, dims));
  }

  /** A small constant, named by its type, shape and value: one initializer per value. */
  constant(dtype: 'float32' | 'float16' | 'int64' | 'int32', dims: number[], values: ArrayLike<number>): string {
    const list = Array.from(values);
    const shown = dims.length === 0 ? String(list[0]) : `[${list.join(', ')}]`;
    const shape = dims.length > 1 ? `${dims.join('x')}/` : '';
    return this.initializer(`/model/constants/${ONNX_DTYPE_LABEL[dtype]}/${shape}${shown}`, dtype, dims, list);
  }

  /** A constant table too large to name by value (rotary tables): an absolute name, unscoped. */
  namedConstant(name: string, dtype: 'float32' | 'int64' | 'int32', dims: number[], values: ArrayLike<number>): string {
    return this.initializer(name, dtype, dims, values);
  }

  /** A named constant of a float type given as float32 values (`float16` is converted). */
  namedConstantOfType(name: string, dtype: 'float32' | 'float16', dims: number[], values: ArrayLike<number>): string {
    return this.initializer(name, dtype, dims, values);
  }

  private initializer(name: string, dtype: 'float32' | 'float16' | 'int64' | 'int32', dims: number[], values: ArrayLike<number>): string {
    if (this.constants.has(name)) return name;
    const raw =
      dtype === 'float32'
        ? new Uint8Array((values instanceof Float32Array ? values : Float32Array.from(values)).buffer.slice(0))
        : dtype === 'float16'
          ? new Uint8Array(Uint16Array.from(Array.from(values), (v) => f32ToF16(v)).buffer)
          : dtype === 'int32'
            ? new Uint8Array(Int32Array.from(Array.from(values)).buffer)
            : new Uint8Array(BigInt64Array.from(Array.from(values), (v) => BigInt(v)).buffer);
    this.initializers.push(onnx.TensorProto.create({ name, dataType: ONNX_DTYPE[dtype], dims, rawData: raw }));
    this.constants.add(name);
    return name;
  }

  /** A 1-D int64 constant (shapes, axes, sizes). */
  ints(values: number[]): string {
    return this.constant('int64', [values.length], values);
  }

  /** An int64 scalar. */
  int(value: number): string {
    return this.constant('int64', [], [value]);
  }

  /** A float32 scalar. */
  scalar(value: number): string {
    return this.constant('float32', [], [value]);
  }

  /** `x` as `to` (no node when `from` already is `to`). */
  cast(x: string, to: DTypeName, from?: DTypeName, name = `cast_to_${to}`): string {
    if (from === to) return x;
    return this.node('Cast', [x], { name, attrs: { to: ONNX_DTYPE[to] } });
  }

  // ---- ops whose best form depends on the provider -------------------------------------

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
    if (this.target !== 'webgpu') {
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
    if (this.target !== 'webgpu') return this.node('LogSoftmax', [x], { name, attrs: { axis: 1 } });
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
    if (this.target !== 'webgpu')
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
    if (this.target !== 'webgpu') return this.node('NonZero', [x], { name });
    return this.node('NonZero', [this.node('Greater', [x, this.scalar(0)], { name: `${name}_mask` })], { name });
  }

  /** Rows of `updates` added onto zeros of `shape` at `indices` ([n, 1]), in `dtype`:
   *   ScatterND(Expand(0, shape), indices, updates, reduction add)
   *   webgpu, float16: the same in float32 between two Casts (its ScatterND has no float16
   *   reduction: "Reduction is not supported for data type"). */
  scatterAdd(shape: string, indices: string, updates: string, dtype: DTypeName, name = 'combine'): string {
    const wide = this.target === 'webgpu' && dtype !== 'float32';
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
    if (this.target !== 'webgpu') return this.node('ReduceMean', [x, this.ints([-1])], { name, attrs: { keepdims: 1 } });
    return this.node('MatMul', [x, this.constant('float32', [width, 1], new Array<number>(width).fill(1 / width))], { name });
  }

  /** RMSNorm over the last axis (of size `width`), in float32, scaled by `scale()`:
   *   cpu, cuda, and webgpu rows `any`: x ─► Pow(2) ─► rowMean ─► Add(eps) ─► Sqrt ─► Div(x, ·) ─► Mul(scale)
   *     (onnxruntime fuses it into SimplifiedLayerNormalization on the CPU)
   *   webgpu rows `several`: SimplifiedLayerNormalization(x, scale): one node for six, and
   *     on lavapipe half the time at the 360M shape (bench/gpu-kernels.ts) */
  rmsNorm(x: string, scale: () => string, width: number, epsilon: number, rows: NormRows): string {
    if (this.target === 'webgpu' && rows === 'several') {
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
    if (this.target !== 'webgpu' || rows === 'several') {
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
    if (this.target !== 'webgpu') {
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
    if (this.target !== 'webgpu') return this.node('ConstantOfShape', [shape], { name, attrs: {} });
    return this.node('Expand', [this.scalar(0), shape], { name });
  }

  /** A checkpoint weight, referenced in place inside its safetensors file. */
  external(name: string, tensor: ExternalTensor): string {
    this.initializers.push(
      onnx.TensorProto.create({
        name,
        dataType: ONNX_DTYPE[tensor.dtype],
        dims: tensor.shape,
        dataLocation: onnx.TensorProto.DataLocation.EXTERNAL,
        externalData: [
          { key: 'location', value: tensor.location },
          { key: 'offset', value: String(tensor.offset) },
          { key: 'length', value: String(tensor.length) },
        ],
      }),
    );
    return name;
  }

  /** Serialise as an ONNX model (IR 10, opset 21 unless asked — bench/attention-ops.ts
   * tries opset 23's Attention — + com.microsoft). */
  encode(graphName: string, opset = 21): Uint8Array {
    this.emitIndexFeeds();
    const model = onnx.ModelProto.create({
      irVersion: 10,
      producerName: 'ctxprobe',
      opsetImport: [
        { domain: '', version: opset },
        { domain: 'com.microsoft', version: 1 },
      ],
      graph: onnx.GraphProto.create({
        name: graphName,
        node: this.nodes,
        initializer: this.initializers,
        input: this.inputs,
        output: this.outputs,
      }),
    });
    return onnx.ModelProto.encode(model).finish();
  }

  get nodeCount(): number {
    return this.nodes.length;
  }
}

function valueInfo(name: string, dtype: DTypeName, dims: (number | string)[]) {
  return onnx.ValueInfoProto.create({
    name,
    type: {
      tensorType: {
        elemType: ONNX_DTYPE[dtype],
        shape: { dim: dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) },
      },
    },
  });
}

function makeAttr(name: string, value: AttrValue) {
  const T = onnx.AttributeProto.AttributeType;
  if (value instanceof FloatAttr) return { name, type: T.FLOAT, f: value.value };
  if (typeof value === 'string') return { name, type: T.STRING, s: new TextEncoder().encode(value) };
  if (typeof value === 'number') {
    return Number.isInteger(value) ? { name, type: T.INT, i: value } : { name, type: T.FLOAT, f: value };
  }
  if (value.length > 0 && value[0] instanceof FloatAttr) {
    return { name, type: T.FLOATS, floats: (value as FloatAttr[]).map((v) => v.value) };
  }
  return { name, type: T.INTS, ints: value as number[] };
}
