// Weights that live once on the device, read by every session of the model.
//
// onnxruntime gives each session its own copy of its initializers: on WebGPU the scoring
// session and the probe session (made on the first probe) each held every weight on the
// device, twice the model's size from the first probe on. So on a provider whose sessions
// can read each other's device tensors (`deviceWeights`), a graph is split in two:
//
//   checkpoint weights ─► weight nodes (Cast, Transpose, …: all their inputs constant)
//        │                     │
//        └───────┬─────────────┘
//                ▼  boundary values: read by a node of the pass
//   upload groups: small graphs, each a few weights and the nodes that make their boundary
//   values, folded and run once at load on the CPU, then released; a carrier session per
//   element type copies each output to the device (and owns it for the model's life)
//                ▼
//   the model graph: each boundary value an input named by what it is
//   (`device/Transpose[perm=1,0](model.layers.0.mlp.down_proj.weight)`), fed from the device
//   tensors the uploads left — the same tensors to every session.
//
// A group's weight nodes are the ones onnxruntime folded at load before (their inputs are
// all constant, and it folds with its CPU kernels): it folds them now in the group's CPU
// session, so the values are the same bits. Groups hold at most GROUP_BYTES each (or one
// value larger), so a load holds the weights on the device plus about a group on the host.
import type onnxProto from 'onnx-proto';
import { ONNX_ELEMENT_BYTES } from '../common/dtypes.js';

type OnnxNode = InstanceType<typeof onnxProto.onnx.NodeProto>;
type Initializer = InstanceType<typeof onnxProto.onnx.TensorProto>;

/** A value's element type (ONNX's code) and dims where known. */
export interface WeightValue {
  name: string;
  elemType: number;
  dims?: number[];
}

/** One upload: its nodes and initializers, and the boundary values it outputs (named as the
 * model graph's inputs), with their bytes where known. */
export interface UploadGroup {
  nodes: OnnxNode[];
  initializers: Initializer[];
  outputs: { value: string; as: WeightValue }[];
  bytes: number;
}

export interface SplitGraph {
  /** The model graph's nodes and initializers without the weights and weight nodes. */
  nodes: OnnxNode[];
  initializers: Initializer[];
  /** The inputs the model graph gains: the boundary values. */
  inputs: WeightValue[];
  groups: UploadGroup[];
}

/** An upload group holds up to this many bytes of outputs, or one value larger: its folded
 * values are on the host while it goes up (bench/device-weights.ts, lavapipe, 830 MiB
 * float32: the load peaked at 1.80x the weights with 256 MiB groups, 1.74x with 32 MiB). */
export const GROUP_BYTES = 32 * 2 ** 20;

interface Known {
  elemType: number;
  dims?: number[];
  /** Depends on a checkpoint weight. */
  weight: boolean;
  /** What the value is, by the nodes and initializers it is made from. */
  canon: string;
  /** The node that makes it (undefined for an initializer). */
  producer?: OnnxNode;
}

function attrText(n: OnnxNode): string {
  if (n.attribute.length === 0) return '';
  const parts = n.attribute.map((a) => {
    if (a.ints && a.ints.length > 0) return `${a.name}=${a.ints.map(Number).join(',')}`;
    if (a.s && a.s.length > 0) return `${a.name}=${new TextDecoder().decode(a.s)}`;
    if (a.floats && a.floats.length > 0) return `${a.name}=${a.floats.join(',')}`;
    return `${a.name}=${a.type === 1 ? a.f : Number(a.i)}`;
  });
  return `[${parts.join(';')}]`;
}

function intAttr(n: OnnxNode, name: string): number | undefined {
  const a = n.attribute.find((x) => x.name === name);
  return a ? Number(a.i) : undefined;
}

/** The element type and dims of a weight node's output, where its op says them. */
function outputOf(n: OnnxNode, inputs: Known[]): { elemType: number; dims?: number[] } {
  const first = inputs[0]!;
  switch (n.opType) {
    case 'Cast':
      return { elemType: intAttr(n, 'to')!, ...(first.dims && { dims: first.dims }) };
    case 'Transpose': {
      const dims = first.dims;
      if (!dims) return { elemType: first.elemType };
      const perm = n.attribute.find((a) => a.name === 'perm')?.ints?.map(Number) ?? dims.map((_, i) => dims.length - 1 - i);
      return { elemType: first.elemType, dims: perm.map((p) => dims[p]!) };
    }
    case 'Identity':
    case 'Neg':
    case 'Sqrt':
    case 'Exp':
      return { elemType: first.elemType, ...(first.dims && { dims: first.dims }) };
    case 'Add':
    case 'Sub':
    case 'Mul':
    case 'Div': {
      const [a, b] = [first.dims, inputs[1]!.dims];
      if (!a || !b) return { elemType: first.elemType };
      const rank = Math.max(a.length, b.length);
      const dims = Array.from({ length: rank }, (_, i) => {
        const x = a[a.length - rank + i] ?? 1;
        const y = b[b.length - rank + i] ?? 1;
        return x === 1 ? y : x;
      });
      return { elemType: first.elemType, dims };
    }
    default:
      return { elemType: first.elemType };
  }
}

const bytesOf = (v: { elemType: number; dims?: number[] }) =>
  v.dims ? v.dims.reduce((n, d) => n * d, 1) * (ONNX_ELEMENT_BYTES[v.elemType] ?? 4) : undefined;

const externalBytes = (t: Initializer) => Number(t.externalData.find((e) => e.key === 'length')?.value ?? 0);

/** Every value a node reads, in its subgraphs too (an If's branches read enclosing values). */
function reads(n: OnnxNode, into: Set<string>): void {
  for (const i of n.input) if (i) into.add(i);
  for (const a of n.attribute) if (a.g) for (const m of a.g.node as OnnxNode[]) reads(m, into);
}

function rename(n: OnnxNode, names: ReadonlyMap<string, string>): void {
  n.input = n.input.map((i) => names.get(i) ?? i);
  for (const a of n.attribute) if (a.g) for (const m of a.g.node as OnnxNode[]) rename(m, names);
}

/**
 * Split a graph (top-level `nodes` in order, `initializers`, of which `externals` are the
 * checkpoint's weights; `outputs` the graph's) into the model graph, whose weights are
 * inputs, and the upload groups that make those inputs. Undefined where no node reads a
 * weight.
 */
export function splitDeviceWeights(
  nodes: readonly OnnxNode[],
  initializers: readonly Initializer[],
  externals: ReadonlyMap<string, Initializer>,
  outputs: ReadonlySet<string>,
): SplitGraph | undefined {
  const known = new Map<string, Known>();
  for (const t of initializers)
    known.set(t.name, { elemType: t.dataType, dims: t.dims.map(Number), weight: externals.has(t.name), canon: t.name });
  // Weight nodes: all inputs constant, one at least a weight (or made from one).
  const weightNodes = new Set<OnnxNode>();
  for (const n of nodes) {
    if (n.attribute.some((a) => a.g)) continue;
    const ins = n.input.filter((i) => i !== '');
    if (ins.length === 0 || !ins.every((i) => known.has(i))) continue;
    const inputs = ins.map((i) => known.get(i)!);
    const weight = inputs.some((k) => k.weight);
    if (weight) weightNodes.add(n);
    const made = outputOf(n, inputs);
    const canon = `${n.opType}${attrText(n)}(${inputs.map((k) => k.canon).join(',')})`;
    n.output.forEach((o, i) =>
      known.set(o, { ...(i === 0 ? made : { elemType: made.elemType }), weight, canon: i === 0 ? canon : `${canon}#${i}`, producer: n }),
    );
  }
  // Boundary values: weight values a node of the pass reads, or a graph output.
  const passReads = new Set<string>();
  for (const n of nodes) if (!weightNodes.has(n)) reads(n, passReads);
  const boundary = [...new Set([...passReads, ...outputs])].filter((v) => known.get(v)?.weight);
  if (boundary.length === 0) return undefined;

  // Each boundary value's makers: the nodes and initializers it is made from.
  const byName = new Map(initializers.map((t) => [t.name, t]));
  const makers = (value: string) => {
    const made = { nodes: new Set<OnnxNode>(), initializers: new Set<string>() };
    const visit = (v: string) => {
      const k = known.get(v)!;
      if (!k.producer) return void made.initializers.add(v);
      if (made.nodes.has(k.producer)) return;
      made.nodes.add(k.producer);
      for (const i of k.producer.input) if (i) visit(i);
    };
    visit(value);
    return made;
  };
  // Boundary values that share a weight are uploaded together (union by weight).
  const parent = boundary.map((_, i) => i);
  const root = (i: number): number => (parent[i] === i ? i : (parent[i] = root(parent[i]!)));
  const made = boundary.map(makers);
  const owner = new Map<string, number>();
  made.forEach((m, i) => {
    for (const w of m.initializers) {
      if (!externals.has(w)) continue;
      const j = owner.get(w);
      if (j === undefined) owner.set(w, i);
      else parent[root(i)] = root(j);
    }
  });
  const components = new Map<number, number[]>();
  boundary.forEach((_, i) => components.set(root(i), [...(components.get(root(i)) ?? []), i]));

  const asInput = (v: string): WeightValue => {
    const k = known.get(v)!;
    return { name: `device/${k.canon}`, elemType: k.elemType, ...(k.dims && { dims: k.dims }) };
  };
  const componentBytes = (members: number[]) => {
    const sized = members.map((i) => bytesOf(known.get(boundary[i]!)!));
    if (sized.every((b) => b !== undefined)) return sized.reduce((a, b) => a! + b!, 0)!;
    const weights = new Set(members.flatMap((i) => [...made[i]!.initializers].filter((w) => externals.has(w))));
    return [...weights].reduce((n, w) => n + externalBytes(externals.get(w)!), 0);
  };
  const groups: UploadGroup[] = [];
  let open: UploadGroup | undefined;
  const order = new Map(nodes.map((n, i) => [n, i]));
  for (const members of components.values()) {
    const bytes = componentBytes(members);
    if (!open || open.bytes + bytes > GROUP_BYTES) {
      open = { nodes: [], initializers: [], outputs: [], bytes: 0 };
      groups.push(open);
    }
    const nodeSet = new Set(open.nodes);
    const initSet = new Set(open.initializers.map((t) => t.name));
    for (const i of members) {
      for (const n of made[i]!.nodes) nodeSet.add(n);
      for (const w of made[i]!.initializers) if (!initSet.has(w)) (initSet.add(w), open.initializers.push(byName.get(w)!));
      open.outputs.push({ value: boundary[i]!, as: asInput(boundary[i]!) });
    }
    open.nodes = [...nodeSet].sort((a, b) => order.get(a)! - order.get(b)!);
    open.bytes += bytes;
  }

  // The model graph: the pass's nodes, reading each boundary value as an input.
  const names = new Map(boundary.map((v) => [v, asInput(v).name]));
  const kept = nodes.filter((n) => !weightNodes.has(n));
  for (const n of kept) rename(n, names);
  const used = new Set<string>();
  for (const n of kept) reads(n, used);
  for (const o of outputs) used.add(o);
  return {
    nodes: kept,
    initializers: initializers.filter((t) => !externals.has(t.name) && used.has(t.name)),
    inputs: boundary.map(asInput),
    groups,
  };
}
