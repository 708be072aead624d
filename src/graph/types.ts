// Element types through an ONNX graph, from its inputs and initializers, by each op's ONNX
// output-type rule (the ops our graphs emit): what the CUDA kernel check (test) and the
// WebGPU placement report (a node on the CPU is float compute or index arithmetic) read.
import onnxProto from 'onnx-proto';

const ELEMENT: Record<number, string> = {
  1: 'float',
  2: 'uint8',
  3: 'int8',
  5: 'int16',
  6: 'int32',
  7: 'int64',
  9: 'bool',
  10: 'float16',
  11: 'double',
  12: 'uint32',
  16: 'bfloat16',
};
const BOOL_OUT = new Set(['Equal', 'Less', 'LessOrEqual', 'Greater', 'GreaterOrEqual', 'And', 'Not']);
const INT64_OUT = new Set(['Shape', 'NonZero', 'ArgMax']);
// Ops whose every output has the type of one input (ONNX's type constraints): which input.
const SAME_AS_INPUT: Record<string, number> = {
  ...Object.fromEntries(
    [
      'Add',
      'Sub',
      'Mod',
      'CumSum',
      'Mul',
      'Div',
      'Pow',
      'Neg',
      'Sqrt',
      'Max',
      'Min',
      'Sigmoid',
      'Tanh',
      'Exp',
      'Log',
      'Gelu',
      'MatMul',
      'FusedMatMul',
      'Softmax',
      'LogSoftmax',
      'ReduceMax',
      'ReduceMin',
      'ReduceMean',
      'ReduceSum',
      'Gather',
      'GatherElements',
      'GatherND',
      'ScatterElements',
      'ScatterND',
      'Slice',
      'Reshape',
      'Concat',
      'Split',
      'Squeeze',
      'Unsqueeze',
      'Transpose',
      'Expand',
      'Identity',
      'Range',
      'LayerNormalization',
      'SimplifiedLayerNormalization',
      'SkipSimplifiedLayerNormalization',
      'SkipLayerNormalization',
      'RotaryEmbedding',
      'ReduceLogSumExp',
      'MatMulNBits',
    ].map((op) => [op, 0]),
  ),
  Where: 1,
  // Its values are its scales' type.
  GatherBlockQuantized: 2,
  OneHot: 2,
};

export type Graph = onnxProto.onnx.IGraphProto;

/** Element types of a graph's values; a subgraph (an If branch) starts from its enclosing
 * graph's. */
export function inferTypes(graph: Graph, outer = new Map<string, string>()): Map<string, string> {
  const types = new Map(outer);
  for (const v of [...(graph.input ?? []), ...(graph.output ?? [])]) types.set(v.name!, ELEMENT[v.type!.tensorType!.elemType!]!);
  for (const t of graph.initializer ?? []) types.set(t.name!, ELEMENT[t.dataType!]!);
  for (const node of graph.node ?? []) {
    const outs = node.output ?? [];
    const attr = (name: string) => node.attribute?.find((a) => a.name === name);
    let out: string[];
    if (node.opType === 'Cast') out = [ELEMENT[Number(attr('to')!.i)]!];
    else if (BOOL_OUT.has(node.opType!)) out = ['bool'];
    else if (INT64_OUT.has(node.opType!)) out = ['int64'];
    else if (node.opType === 'TopK') out = [types.get(node.input![0]!)!, 'int64'];
    else if (node.opType === 'ConstantOfShape') {
      const value = attr('value')?.t;
      out = [value ? ELEMENT[value.dataType!]! : 'float'];
    } else if (node.opType === 'LayerNormalization') out = [types.get(node.input![0]!)!, 'float', 'float'];
    else if (node.opType === 'If') {
      const then = attr('then_branch')!.g!;
      const inner = inferTypes(then, types);
      out = then.output!.map((o) => inner.get(o.name!)!);
    } else if (node.opType! in SAME_AS_INPUT) out = outs.map(() => types.get(node.input![SAME_AS_INPUT[node.opType!]!]!)!);
    else throw new Error(`${node.name}: no output-type rule for ${node.opType} (add it to src/graph/types.ts)`);
    outs.forEach((name, i) => {
      const t = out[Math.min(i, out.length - 1)];
      if (name === '') return;
      if (!t) throw new Error(`${node.name}: output ${i} has no type`);
      const declared = types.get(name); // graph outputs are declared with their type
      if (declared && declared !== t) throw new Error(`${node.name}: output ${name} is ${t}, declared ${declared}`);
      types.set(name, t);
    });
  }
  return types;
}
