// A small ONNX graph builder over onnx-proto: nodes, scopes, inputs and outputs, constants,
// the checkpoint's weights, and the serialised model. The ops whose form depends on the
// provider are GraphBuilder's (builder.ts), built on this.
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
import { PROVIDERS, type ProviderKind, type ProviderProfile } from '../common/providers.js';
import { INDEX_FEEDS, INDEX_FEED_SIZES, sizeInput, type IndexFeed, type IndexFeedPlan } from './index-feeds.js';
import { holdMappedWeights, type DerivedWeight, type HeldWeights } from './held-weights.js';
import { splitDeviceWeights, type WeightValue } from './device-weights.js';

/** A graph that uploads weights to the device once (graph/device-weights.ts): its outputs,
 * named as the model graph's inputs, and their bytes. */
export interface DeviceUpload {
  model: Uint8Array;
  outputs: string[];
  bytes: number;
}

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


export interface NodeOptions {
  attrs?: Record<string, AttrValue>;
  domain?: string;
  outputs?: number;
}

export class OnnxGraph {
  protected nodes: InstanceType<typeof onnx.NodeProto>[] = [];
  private readonly initializers: InstanceType<typeof onnx.TensorProto>[] = [];
  /** The checkpoint weights among them, by name. */
  private readonly externals = new Map<string, InstanceType<typeof onnx.TensorProto>>();
  /** Those derived at load from the bytes they name (held-weights.ts). */
  private readonly derived = new Map<string, DerivedWeight>();
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

  /** What the provider the graph is for can run, and in which form (common/providers.ts). */
  readonly provider: ProviderProfile;

  constructor(kind: ProviderKind = 'cpu') {
    this.provider = PROVIDERS[kind];
  }

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

  /** Whether the graph has declared input `name`. */
  hasInput(name: string): boolean {
    return this.inputs.some((i) => i.name === name);
  }

  input(name: string, dtype: DTypeName, dims: (number | string)[]): string {
    this.inputs.push(valueInfo(name, dtype, dims));
    return name;
  }

  /** The element type of index values (ids, positions, rows) in this graph: int64, or, with
   * packed index feeds (WebGPU), int32, which its kernels compute in (index-feeds.ts). */
  get indexType(): 'int32' | 'int64' {
    return this.provider.packedIndexFeeds ? 'int32' : 'int64';
  }

  /** An integer feed of a pass, in `indexType`: an int64 input, or with packed index feeds
   * (WebGPU) a piece of the one int32 input `index_feeds` (its nodes are made at `encode`). */
  indexInput(name: string, dims: (number | string)[]): string {
    if (!this.provider.packedIndexFeeds) return this.input(name, 'int64', dims);
    this.indexFeeds.push({ name, dims });
    return `/model/index_feeds/${name}`;
  }

  /** A scalar constant in `indexType`. */
  index(value: number): string {
    return this.constant(this.indexType, [], [value]);
  }

  /** The size of named dim `dim` of the index feeds, int64 [1] on the host, with packed
   * index feeds (a Reshape's shape, a Slice's end): an input of its own, where a Shape of a
   * device tensor would run on the CPU and wait for the device. */
  size(dim: string): string {
    if (!this.provider.packedIndexFeeds) throw new Error(`size(${dim}): a graph with packed index feeds has it`);
    const name = sizeInput(dim);
    if (!this.sizes.includes(dim)) {
      this.sizes.push(dim);
      this.input(name, 'int64', [1]);
    }
    return name;
  }

  /** What `index_feeds` carries (empty without packed index feeds, or with no index feeds). */
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
  constant(dtype: 'float32' | 'float16' | 'int64' | 'int32' | 'uint32', dims: number[], values: ArrayLike<number>): string {
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

  private initializer(name: string, dtype: 'float32' | 'float16' | 'int64' | 'int32' | 'uint32', dims: number[], values: ArrayLike<number>): string {
    if (this.constants.has(name)) return name;
    const raw =
      dtype === 'float32'
        ? new Uint8Array((values instanceof Float32Array ? values : Float32Array.from(values)).buffer.slice(0))
        : dtype === 'float16'
          ? new Uint8Array(Uint16Array.from(Array.from(values), (v) => f32ToF16(v)).buffer)
          : dtype === 'uint32'
            ? new Uint8Array(Uint32Array.from(Array.from(values)).buffer)
            : dtype === 'int32'
              ? new Uint8Array(Int32Array.from(Array.from(values)).buffer)
              : new Uint8Array(BigInt64Array.from(Array.from(values), (v) => BigInt(v)).buffer);
    this.initializers.push(onnx.TensorProto.create({ name, dataType: ONNX_DTYPE[dtype], dims, rawData: raw }));
    this.constants.add(name);
    return name;
  }

  /** An initializer of that name exists (a constant, or a weight). */
  hasInitializer(name: string): boolean {
    return this.constants.has(name) || this.externals.has(name);
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


  /** A checkpoint weight, referenced in place inside its safetensors file; or, `derived`,
   * a tensor the session thread derives from those bytes at load into the private copy
   * (held-weights.ts: quantized blocks repacked). */
  external(name: string, tensor: ExternalTensor, derived?: DerivedWeight): string {
    if (derived) this.derived.set(name, derived);
    const init = onnx.TensorProto.create({
      name,
      dataType: ONNX_DTYPE[tensor.dtype],
      dims: tensor.shape,
      dataLocation: onnx.TensorProto.DataLocation.EXTERNAL,
      externalData: [
        { key: 'location', value: tensor.location },
        { key: 'offset', value: String(tensor.offset) },
        { key: 'length', value: String(tensor.length) },
      ],
    });
    this.initializers.push(init);
    this.externals.set(name, init);
    return name;
  }

  /** Where the provider would leave weights mapped from the file for a session's life
   * (`mappedWeights`), point them into a private copy at `where.file` that the session thread
   * writes, and say what it holds (graph/held-weights.ts). Call once the graph is complete. */
  holdMappedWeights(where: { file: string; weightsDir: string }): HeldWeights | undefined {
    const mapped = this.provider.mappedWeights;
    if (!mapped && this.derived.size === 0) return undefined;
    return holdMappedWeights(this.nodes, this.externals, mapped ? mapped.copiedAs : 'all', where, this.derived);
  }

  /** Serialise as an ONNX model (IR 10, opset 21 unless asked — bench/attention-ops.ts
   * tries opset 23's Attention — + com.microsoft). */
  encode(graphName: string, opset = 21): Uint8Array {
    this.emitIndexFeeds();
    return encodeModel(graphName, opset, this.nodes, this.initializers, this.inputs, this.outputs);
  }

  /** Serialise with the weights as inputs, and the graphs that upload them to the device
   * once (graph/device-weights.ts); as `encode`, and no uploads, where no node reads one. */
  encodeWithDeviceWeights(graphName: string, opset = 21): { model: Uint8Array; uploads: DeviceUpload[] } {
    this.emitIndexFeeds();
    const split = splitDeviceWeights(this.nodes, this.initializers, this.externals, new Set(this.outputs.map((o) => o.name)));
    if (!split) return { model: this.encode(graphName, opset), uploads: [] };
    const info = (v: WeightValue) => valueInfoOfType(v.name, v.elemType, v.dims);
    const model = encodeModel(graphName, opset, split.nodes, split.initializers, [...this.inputs, ...split.inputs.map(info)], this.outputs);
    const uploads = split.groups.map((group, k) => {
      const names = group.outputs.map(({ value, as }, i) =>
        onnx.NodeProto.create({ name: `/upload/output_${i}`, opType: 'Identity', input: [value], output: [as.name] }),
      );
      return {
        model: encodeModel(`${graphName}/upload_${k}`, opset, [...group.nodes, ...names], group.initializers, [], group.outputs.map(({ as }) => info(as))),
        outputs: group.outputs.map(({ as }) => as.name),
        bytes: group.bytes,
      };
    });
    return { model, uploads };
  }

  get nodeCount(): number {
    return this.nodes.length;
  }
}

/** The graphs that carry a host tensor `x` of each element type weights come in to the
 * device (graph/device-weights.ts), by onnxruntime's name for the type: no node, the input
 * is the output, so onnxruntime copies the feed once, into the output's device buffer. */
export function carrierGraphs(): Record<string, Uint8Array> {
  const types = ['float32', 'float16', 'int32', 'int64', 'uint8', 'uint32'] as const;
  return Object.fromEntries(
    types.map((t) => [t, encodeModel(`ctxprobe/carrier/${t}`, 21, [], [], [valueInfoOfType('x', ONNX_DTYPE[t])], [valueInfoOfType('x', ONNX_DTYPE[t])])]),
  );
}

/** A one-value graph (a Neg on the device, its output read back): run to wait for the
 * device (the weights' upload, workers/session/passes.ts). */
export function syncGraph(): Uint8Array {
  return encodeModel('ctxprobe/sync', 21, [onnx.NodeProto.create({ name: '/sync', opType: 'Neg', input: ['x'], output: ['y'] })], [], [valueInfoOfType('x', ONNX_DTYPE.float32, [1])], [valueInfoOfType('y', ONNX_DTYPE.float32, [1])]);
}

function valueInfo(name: string, dtype: DTypeName, dims: (number | string)[]) {
  return valueInfoOfType(name, ONNX_DTYPE[dtype], dims);
}

/** A value's declaration by ONNX element type; without `dims`, of any shape. */
function valueInfoOfType(name: string, elemType: number, dims?: (number | string)[]) {
  return onnx.ValueInfoProto.create({
    name,
    type: {
      tensorType: {
        elemType,
        ...(dims && { shape: { dim: dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) } }),
      },
    },
  });
}

type Proto<K extends keyof typeof onnx> = (typeof onnx)[K] extends abstract new (...args: never[]) => infer T ? T : never;

function encodeModel(
  graphName: string,
  opset: number,
  node: Proto<'NodeProto'>[],
  initializer: Proto<'TensorProto'>[],
  input: Proto<'ValueInfoProto'>[],
  output: Proto<'ValueInfoProto'>[],
): Uint8Array {
  const model = onnx.ModelProto.create({
    irVersion: 10,
    producerName: 'ctxprobe',
    opsetImport: [
      { domain: '', version: opset },
      { domain: 'com.microsoft', version: 1 },
    ],
    graph: onnx.GraphProto.create({ name: graphName, node, initializer, input, output }),
  });
  return onnx.ModelProto.encode(model).finish();
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
