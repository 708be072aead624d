// A small ONNX graph builder over onnx-proto.
//
// Nodes are named by where they live (`/model/layers.3/attn/q_proj/MatMul`), in the
// style of onnxruntime-genai's model builder, so a profile or a Netron view of the
// graph reads like the model code that emitted it. Checkpoint weights enter the graph
// as external initializers that point into the safetensors files: they are never
// copied into the model proto.
import onnxProto from 'onnx-proto';

const { onnx } = onnxProto;

export const DType = {
  float32: onnx.TensorProto.DataType.FLOAT,
  float16: onnx.TensorProto.DataType.FLOAT16,
  bfloat16: onnx.TensorProto.DataType.BFLOAT16,
  int64: onnx.TensorProto.DataType.INT64,
  int32: onnx.TensorProto.DataType.INT32,
  bool: onnx.TensorProto.DataType.BOOL,
} as const;
export type DTypeName = keyof typeof DType;

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

export class GraphBuilder {
  private readonly nodes: InstanceType<typeof onnx.NodeProto>[] = [];
  private readonly initializers: InstanceType<typeof onnx.TensorProto>[] = [];
  private readonly inputs: InstanceType<typeof onnx.ValueInfoProto>[] = [];
  private readonly outputs: InstanceType<typeof onnx.ValueInfoProto>[] = [];
  private readonly scopeStack: string[] = [];
  private readonly usedNames = new Set<string>();
  private readonly constants = new Map<string, string>();

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
        input: inputs,
        output: outputs,
        attribute: Object.entries(options.attrs ?? {}).map(([key, value]) => makeAttr(key, value)),
      }),
    );
    return outputs;
  }

  /** Emit one single-output node; `name` defaults to the op type. */
  node(opType: string, inputs: string[], options: NodeOptions & { name?: string } = {}): string {
    return this.nodeN(opType, options.name ?? opType, inputs, options)[0]!;
  }

  input(name: string, dtype: DTypeName, dims: (number | string)[]): string {
    this.inputs.push(valueInfo(name, dtype, dims));
    return name;
  }

  /** Declare `value` a graph output under `name` (an Identity keeps names stable). */
  output(name: string, value: string, dtype: DTypeName, dims: (number | string)[]): void {
    this.nodes.push(onnx.NodeProto.create({ name: `/outputs/${name}`, opType: 'Identity', input: [value], output: [name] }));
    this.outputs.push(valueInfo(name, dtype, dims));
  }

  /** A small constant tensor embedded in the graph (shapes, scalars, rope tables). */
  constant(name: string, dtype: 'float32' | 'int64', dims: number[], values: ArrayLike<number>): string {
    const key = `${dtype}:${dims.join(',')}:${Array.from(values).join(',')}`;
    const known = this.constants.get(key);
    if (known) return known;
    const fullName = this.qualified(name);
    const raw =
      dtype === 'float32'
        ? new Uint8Array(Float32Array.from(values).buffer)
        : new Uint8Array(BigInt64Array.from(Array.from(values), (v) => BigInt(v)).buffer);
    this.initializers.push(onnx.TensorProto.create({ name: fullName, dataType: DType[dtype], dims, rawData: raw }));
    this.constants.set(key, fullName);
    return fullName;
  }

  ints(values: number[], name = 'ints'): string {
    return this.constant(`/constants/${name}`, 'int64', [values.length], values);
  }

  scalar(value: number, name = 'scalar'): string {
    return this.constant(`/constants/${name}`, 'float32', [], [value]);
  }

  /** A checkpoint weight, referenced in place inside its safetensors file. */
  external(name: string, tensor: ExternalTensor): string {
    this.initializers.push(
      onnx.TensorProto.create({
        name,
        dataType: DType[tensor.dtype],
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

  /** Serialise as an ONNX model (IR 10, opset 21 + com.microsoft). */
  encode(graphName: string): Uint8Array {
    const model = onnx.ModelProto.create({
      irVersion: 10,
      producerName: 'ctxprobe',
      opsetImport: [
        { domain: '', version: 21 },
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
        elemType: DType[dtype],
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
