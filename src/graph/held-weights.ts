// Weights a session must not read from the checkpoint file once it is made.
//
// onnxruntime memory-maps the file behind every external initializer. A weight it copies at
// load (a product weight it prepacks, a Cast it folds) is released after the copy and its
// mapping with it; any other — an embedding read by a Gather, a norm weight, a bias — stays
// mapped for the session's life, and a truncation of the file under the server then kills
// the process with SIGBUS at the next pass that touches a page past the new end. So those
// weights move into a private copy: a file of the server's own (in the temporary folder,
// unlinked once the session is made, so nothing else can change it) that the session thread
// writes with plain reads of the checkpoint at load. A file cut short then is a short read
// at load, never a fault later; what is held costs disk (page cache), not process memory.
//
// Why not memory: onnxruntime-node's `externalData` (files given in memory) is refused unless
// every external file is given so ("External file: model.safetensors not found from the
// table user provided"), and weights embedded in the model proto as raw data took three
// times their size at session creation (the proto, onnxruntime's parse of it, its tensor),
// and their size for good. onnxruntime resolves every location against one folder, so a
// graph that holds weights names every file from the root (`/`).
import path from 'node:path';
import type onnxProto from 'onnx-proto';
import { EXACT_FORMS, partRowBytes, quantTypeOf, type RepackPart } from '../checkpoint/ggml-blocks.js';
import { hfForm, type HfQuantized } from '../checkpoint/hf-quantized.js';

type Node = InstanceType<typeof onnxProto.onnx.NodeProto>;
type Tensor = InstanceType<typeof onnxProto.onnx.TensorProto>;

/** A tensor made at load from checkpoint bytes rather than copied: one part of a quantized
 * tensor in the graph's exact form (checkpoint/ggml-blocks.ts), from the `rows` block rows
 * of `cols` values its external names, rows taken in `rowOrder` where given. `tensor` names
 * it in messages (a non-finite scale refuses the load naming it). */
export interface DerivedWeight {
  tensor: string;
  ggmlType: number;
  rows: number;
  cols: number;
  part: RepackPart;
  rowOrder?: readonly number[];
  /** The bytes are float rows of this dtype, quantized to `ggmlType` first (`--quantize`). */
  from?: 'float32' | 'float16' | 'bfloat16';
  /** A GPTQ / AWQ weight: made from its qweight (the external's bytes), qzeros and scales. */
  hf?: HfQuantized;
}

/** The private copy the held weights live in: its absolute path, its size, and where each
 * piece comes from in the checkpoint's files (`location` in the checkpoint's folder): its
 * bytes as they are, or a tensor derived from them (`derived`, `bytes` long). */
export interface HeldWeights {
  file: string;
  bytes: number;
  /** In the weights cache (weights/held-cache.ts): the copy is there already (`reuse`), or is
   * made there and kept (`fill`); else it is made and unlinked once the session is made. */
  cache?: 'reuse' | 'fill';
  pieces: { location: string; offset: number; length: number; at: number; derived?: DerivedWeight & { bytes: number } }[];
}

/** The folder a graph that holds weights resolves its external files against. */
export const HELD_WEIGHTS_ROOT = '/';

/** Each piece starts on a cache line. */
const ALIGN = 64;

/** The bytes a derived weight takes in the private copy. */
export function derivedBytes(d: DerivedWeight): number {
  if (d.hf) return d.rows * partRowBytes(hfForm(d.hf), d.part, d.cols);
  const type = quantTypeOf(d.ggmlType);
  if (!type) throw new Error(`no exact form for ggml type ${d.ggmlType}`);
  return d.rows * partRowBytes(EXACT_FORMS[type], d.part, d.cols);
}

/**
 * Point every external initializer some node reads other than as one of `copiedAs` (op,
 * input slot; `all`: every input is copied at load), and every derived one, into the private
 * copy `file` (absolute), in place, every other one at its file in `weightsDir` from the
 * root, and say what the copy holds (undefined, and nothing changed: nothing to hold).
 * `nodes` are the graph's, subgraphs included through their attributes.
 */
export function holdMappedWeights(
  nodes: readonly Node[],
  externals: ReadonlyMap<string, Tensor>,
  copiedAs: readonly (readonly [op: string, input: number])[] | 'all',
  where: { file: string; weightsDir: string },
  derived: ReadonlyMap<string, DerivedWeight> = new Map(),
): HeldWeights | undefined {
  const held = new Set<string>(derived.keys());
  const visit = (list: readonly Node[]) => {
    for (const n of list) {
      n.input.forEach((value, slot) => {
        if (externals.has(value) && copiedAs !== 'all' && !copiedAs.some(([op, input]) => op === n.opType && input === slot))
          held.add(value);
      });
      for (const a of n.attribute) if (a.g) visit(a.g.node as Node[]);
    }
  };
  visit(nodes);
  if (held.size === 0) return undefined;
  const fromRoot = (file: string) => path.relative(HELD_WEIGHTS_ROOT, file);
  const pieces: HeldWeights['pieces'] = [];
  let bytes = 0;
  for (const [name, tensor] of externals) {
    const entry = (key: string) => tensor.externalData.find((e) => e.key === key)!;
    const location = entry('location').value ?? '';
    if (!held.has(name)) {
      entry('location').value = fromRoot(path.join(where.weightsDir, location));
      continue;
    }
    const length = Number(entry('length').value);
    const d = derived.get(name);
    const size = d ? derivedBytes(d) : length;
    pieces.push({ location, offset: Number(entry('offset').value), length, at: bytes, ...(d && { derived: { ...d, bytes: size } }) });
    entry('location').value = fromRoot(where.file);
    entry('offset').value = String(bytes);
    if (d) entry('length').value = String(size);
    bytes += Math.ceil(size / ALIGN) * ALIGN;
  }
  return { file: where.file, bytes, pieces };
}
