// Laying out kept KV on the GPU. On the CPU the session thread copies pieces of kept KV
// into a new past itself (session.ts, layOut); a WebGPU tensor's memory cannot be read
// from JavaScript (onnxruntime-node 1.30: `getData()` on one aborts the process,
// ../shared/gpu/WEBGPU-NODE.md §1), so there the copy is a graph: this one, run on the
// device, with the pieces' sources as inputs and a column index saying where each output
// slot comes from. Only the index crosses to the device (4 bytes a row's slot, not the KV).
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

// Per tensor i, sources src.i.j [Bⱼ, H, Sⱼ, D]:
//   src.i.j ─Transpose(1,0,2,3)─► [H, Bⱼ, Sⱼ, D] ─Reshape─► [H, Bⱼ·Sⱼ, D] ─┐
//   zero column [H, 1, D] ────────────────────────────────────────────────┴─Concat(1)─► pool [H, R+1, D]
//   pool ─Gather(index [B·L], axis 1)─► [H, B·L, D] ─Reshape(shape = [H, B, L, D])─► ─Transpose─► out.i [B, H, L, D]
export function buildKvLayoutGraph(shape: KvLayoutShape, sources: number): Uint8Array {
  const g = new GraphBuilder('webgpu');
  const { kvHeads: H, headDim: D } = shape;
  const type = kvDType(shape.dtype);
  const index = g.input('index', 'int32', ['slots']);
  const outShape = g.input('shape', 'int64', [4]);
  const zero = g.namedConstantOfType('/layout/constants/zero_column', type, [H, 1, D], new Float32Array(H * D));
  for (let i = 0; i < shape.tensors; i++) {
    g.scope(`layout/tensor.${i}`, () => {
      const columns = Array.from({ length: sources }, (_, j) => {
        const src = g.input(`src.${i}.${j}`, type, [`rows_${j}`, H, `slots_${j}`, D]);
        const heads = g.node('Transpose', [src], { name: `heads_first_${j}`, attrs: { perm: [1, 0, 2, 3] } });
        return g.node('Reshape', [heads, g.ints([H, -1, D])], { name: `columns_${j}` });
      });
      const pool = g.node('Concat', [...columns, zero], { name: 'pool', attrs: { axis: 1 } });
      const gathered = g.node('Gather', [pool, index], { name: 'gathered', attrs: { axis: 1 } });
      const grid = g.node('Reshape', [gathered, outShape], { name: 'grid' });
      g.output(`out.${i}`, g.node('Transpose', [grid], { name: 'rows_first', attrs: { perm: [1, 0, 2, 3] } }), type, [
        'rows',
        H,
        'length',
        D,
      ]);
    });
  }
  return g.encode('ctxprobe/kv_layout');
}
