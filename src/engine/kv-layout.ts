// Laying out kept KV on the GPU. On the CPU the session thread copies pieces of kept KV
// into a new past itself (session.ts, layOut); a WebGPU tensor's memory cannot be read
// from JavaScript (onnxruntime-node 1.30: `getData()` on one aborts the process,
// ../shared/gpu/WEBGPU-NODE.md §1), so there the copy is a graph: this one, run on the
// device, with the pieces' sources as inputs and, per output slot, where it comes from.
// Only that crosses to the device (8 bytes a row's slot, not the KV).
//
// One graph per count of distinct sources, rounded up to a power of two (unused inputs get
// a one-slot zero tensor the index never names), for every layer's keys and values at once.
import { GraphBuilder } from '../graph/builder.js';
import type { ComputeDType } from '../common/dtypes.js';
import { kvDType } from '../common/dtypes.js';

/** The most sources one layout graph takes; a layout of more is made in two stages. */
export const MAX_LAYOUT_SOURCES = 256;

export interface KvLayoutShape {
  /** Tensors laid out per run: every layer's key and value (2 × layers). */
  tensors: number;
  kvHeads: number;
  headDim: number;
  dtype: ComputeDType;
}

/** Source counts a layout graph is built for: 1, 2, 4, … MAX_LAYOUT_SOURCES. */
export function layoutBuckets(): number[] {
  const out: number[] = [];
  for (let n = 1; n <= MAX_LAYOUT_SOURCES; n *= 2) out.push(n);
  return out;
}

// Per tensor i, sources src.i.j [Bⱼ, H, Sⱼ, D], each read as rows of D (no copy):
//   src.i.j ─Reshape─► [Bⱼ·H·Sⱼ, D] ─┐
//   zero row [1, D] ─────────────────┴─Concat(0)─► pool [R+1, D] ─Gather(flat index)─► [B·H·L, D] ─Reshape([B,H,L,D])─► out.i
// The flat index, once for every tensor: the pool row of (b, h, t) is base + h·stride, with
// base and stride per (b, t) from the host (a source's first row for head 0, and its slots
// per head; the zero row and 0 for padding):
//   heads [1,H,1] ─Mul(stride [B,1,L])─Add(base [B,1,L])─Reshape(-1)─► flat index [B·H·L]
// Two copies a tensor (the pool and the gather), where a layout by heads first (Transpose
// each source, Gather on the slot axis, Transpose back) made four and twice the nodes.
export function buildKvLayoutGraph(shape: KvLayoutShape, sources: number): Uint8Array {
  const g = new GraphBuilder('webgpu');
  const { kvHeads: H, headDim: D } = shape;
  const type = kvDType(shape.dtype);
  const base = g.input('base', 'int32', ['rows', 1, 'length']);
  const stride = g.input('stride', 'int32', ['rows', 1, 'length']);
  const outShape = g.input('shape', 'int64', [4]);
  const zero = g.namedConstantOfType('/layout/constants/zero_row', type, [1, D], new Float32Array(D));
  const heads = g.namedConstant(
    '/layout/constants/heads',
    'int32',
    [1, H, 1],
    Array.from({ length: H }, (_, h) => h),
  );
  const index = g.scope('layout/index', () =>
    g.node('Reshape', [g.node('Add', [g.node('Mul', [heads, stride], { name: 'head_offsets' }), base], { name: 'rows' }), g.ints([-1])], {
      name: 'flat',
    }),
  );
  for (let i = 0; i < shape.tensors; i++) {
    g.scope(`layout/tensor.${i}`, () => {
      const srcs = Array.from({ length: sources }, (_, j) => ({
        value: g.input(`src.${i}.${j}`, type, [`rows_${j}`, H, `slots_${j}`, D]),
        name: `rows_${j}`,
      }));
      const gathered = g.gatherRows(srcs, [zero], index, D);
      g.output(`out.${i}`, g.node('Reshape', [gathered, outShape], { name: 'grid' }), type, ['rows', H, 'length', D]);
    });
  }
  return g.encode('ctxprobe/kv_layout');
}
