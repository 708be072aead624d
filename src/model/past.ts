// How a pass's cached past and its new tokens' K/V become each layer's keys and values:
// the past inputs, the conditions that pick a layout (computed once, read by every
// layer), and the placement itself. The decoder's attention reads the result.
//
// Inputs (decoder.ts lists them all): past.L.* and recent.L.* [B', kv_heads, P₀ | P₁,
// head_dim] (row b's past: the first past_lengths[b] slots of the two end to end),
// past_lengths [B], past_rows [B], and key_positions [B, S] for the pass's key slots.
import type { GraphBuilder } from '../graph/builder.js';
import { kvDType, type ComputeDType } from '../common/dtypes.js';
import type { ModelConfig } from './families.js';

/** One layer's past, and the pass-wide facts that choose how its keys are laid out. */
export interface Past {
  /** The past's two parts (past, recent), each [B', kv_heads, ·, head_dim]. */
  key: [string, string];
  value: [string, string];
  /** [B, kv_heads, T, head_dim] int64: the key slot of each new token's K/V. */
  newSlots: string;
  /** [B] int64: the past row each row continues. */
  rows: string;
  layout: Layout;
}

/** How keys are laid out: by the If that fits the pass (CPU, CUDA), or one path that fits
 * every pass (WebGPU, where an If costs a wait for the device: `placeKv`). */
export type Layout =
  | {
      kind: 'branches';
      /** bool scalar: some row's past is shorter than the pass's (its new slots move). */
      ragged: string;
      /** bool [1]: the past has fewer rows than the pass (rows read theirs by `rows`). */
      shared: string;
      /** bool [1]: ragged or shared (the plain path's If). */
      special: string;
      /** bool [1]: the past already has a slot for every key (room for the new ones). */
      roomy: string;
    }
  | {
      kind: 'scatter';
      /** [1] int64: the pass's key slots S (past slots + T). */
      keySlots: string;
    };

/** Declares the past inputs and the pass-wide conditions; `layer(i)` gives layer i's past. */
export function pastInputs(
  g: GraphBuilder,
  c: ModelConfig,
  dt: ComputeDType,
  v: { inputIds: string; keyPositions: string; pastLengths: string; pastRows: string },
): (layer: number) => Past {
  const kvType = kvDType(dt);
  // The past may have fewer rows than the pass (rows sharing one): `past_batch`.
  const kvDims = (part: string) => ['past_batch', c.numKvHeads, part, c.headDim];
  // Every layer's past has the same length: the conditions read it off layer 0's.
  const pastKey0 = g.input('past.0.key', kvType, kvDims('past'));
  const recentKey0 = g.input('recent.0.key', kvType, kvDims('recent'));
  // WebGPU: v.pastLengths is the new slots themselves ([B, T], fed), and the sizes are the
  // graph's `size.*` inputs (a Shape of a device tensor runs on the CPU and waits for it).
  const newSlots = g.scope('model/new_slots', () => (g.target === 'webgpu' ? expandSlots(g, c, v.pastLengths) : slotsOfNew(g, c, v.inputIds, v.pastLengths)));
  const keySlots = () => g.node('Shape', [v.keyPositions], { name: 'key_slots', attrs: { start: 1, end: 2 } });
  const layout: Layout = g.target === 'webgpu' ? { kind: 'scatter', keySlots: g.size('total') } : branchConditions(g, pastKey0, recentKey0, v, keySlots);
  return (i) => ({
    key: [i === 0 ? pastKey0 : g.input(`past.${i}.key`, kvType, kvDims('past')), i === 0 ? recentKey0 : g.input(`recent.${i}.key`, kvType, kvDims('recent'))],
    value: [g.input(`past.${i}.value`, kvType, kvDims('past')), g.input(`recent.${i}.value`, kvType, kvDims('recent'))],
    newSlots,
    rows: v.pastRows,
    layout,
  });
}

/** The conditions the Ifs of `placeKv` read, computed once for every layer. */
function branchConditions(
  g: GraphBuilder,
  pastKey0: string,
  recentKey0: string,
  v: { inputIds: string; pastLengths: string },
  keySlots: () => string,
): Layout {
  //   past, recent ─Shape[2]─Add─► past slots
  //   past_lengths ─Less(past slots)─► [B] ─Cast─ReduceMax─Cast─► ragged (onnxruntime's CUDA
  //   kernels have no ReduceMin at opset 21, and no ReduceMax over bool)
  const ragged = g.scope('model/new_slots', () => {
    const dim = (t: string, name: string) => g.node('Shape', [t], { name, attrs: { start: 2, end: 3 } });
    const slots = g.node('Squeeze', [g.node('Add', [dim(pastKey0, 'past_dims'), dim(recentKey0, 'recent_dims')], { name: 'all_past_dims' }), g.ints([0])], { name: 'past_slots' });
    const short = g.cast(g.node('Less', [v.pastLengths, slots], { name: 'short_rows' }), 'float32', 'bool', 'short_rows_f');
    return g.cast(g.node('ReduceMax', [short], { name: 'any_short', attrs: { keepdims: 0 } }), 'bool', 'float32', 'ragged');
  });
  //   past.0.key, input_ids ─Shape[0]─Equal─Not─► shared (the past has fewer rows than the pass)
  const shared = g.scope('model/past_rows', () => {
    const rows = (t: string, name: string) => g.node('Shape', [t], { name, attrs: { start: 0, end: 1 } });
    return g.node('Not', [g.node('Equal', [rows(pastKey0, 'past_batch'), rows(v.inputIds, 'batch')], { name: 'same_rows' })], { name: 'shared' });
  });
  //   past.0.key ─Shape[2]─┐
  //   key_positions ─Shape[1]─Equal─► roomy: the past was laid out with room for the new
  //   slots (rows of different past lengths, each its own), so they are written into it
  const roomy = g.scope('model/new_slots', () =>
    g.node(
      'Equal',
      [g.node('Shape', [pastKey0], { name: 'laid_out_slots', attrs: { start: 2, end: 3 } }), keySlots()],
      { name: 'roomy' },
    ),
  );
  // ragged or shared, as Not(And(Not, Not)): onnxruntime's CUDA kernels have no Or.
  const special = g.scope('model/past_rows', () =>
    g.node('Not', [g.node('And', [g.node('Not', [ragged], { name: 'not_ragged' }), g.node('Not', [shared], { name: 'not_shared' })], { name: 'plain' })], { name: 'ragged_or_shared' }),
  );
  return { kind: 'branches', ragged, shared, special, roomy };
}

// Where each row's new tokens go among its keys: slot past_lengths[b] + t.
//   past_lengths [B] ─Unsqueeze─► [B,1] ─┐
//   Range(T) ─Unsqueeze─► [1,T] ────────Add─► [B,T] ─Unsqueeze─► [B,1,T,1] ─Expand─► [B,kv,T,D]
function slotsOfNew(g: GraphBuilder, c: ModelConfig, inputIds: string, pastLengths: string): string {
  const dims = g.node('Shape', [inputIds], { name: 'ids_shape' });
  const seqDim = g.node('Slice', [dims, g.ints([1]), g.ints([2])], { name: 'seq_dim' });
  const T = g.node('Squeeze', [seqDim, g.ints([0])], { name: 'seq_len' });
  const t = g.node('Range', [g.int(0), T, g.int(1)], { name: 'new_index' });
  const at = g.node('Add', [g.node('Unsqueeze', [pastLengths, g.ints([1])], { name: 'past_lengths_2d' }), g.node('Unsqueeze', [t, g.ints([0])], { name: 'new_index_2d' })], {
    name: 'slots',
  });
  const shape = g.node('Concat', [g.node('Slice', [dims, g.ints([0]), g.ints([1])], { name: 'batch_dim' }), g.ints([c.numKvHeads]), seqDim, g.ints([c.headDim])], {
    name: 'kv_shape',
    attrs: { axis: 0 },
  });
  return g.node('Expand', [g.node('Unsqueeze', [at, g.ints([1, 3])], { name: 'slots_4d' }), shape], { name: 'slots_kv' });
}

// The fed slots as ScatterElements' indices for every head and dimension:
//   new_slots [B,T] ─Unsqueeze─► [B,1,T,1] ─Expand(B, kv, T, D)─► [B,kv,T,D]
function expandSlots(g: GraphBuilder, c: ModelConfig, slots: string): string {
  const shape = g.node('Concat', [g.size('batch'), g.ints([c.numKvHeads]), g.size('seq'), g.ints([c.headDim])], { name: 'kv_shape', attrs: { axis: 0 } });
  return g.node('Expand', [g.node('Unsqueeze', [slots, g.ints([1, 3])], { name: 'slots_4d' }), shape], { name: 'slots_kv' });
}

// One layer's keys (or values), [B, kv_heads, S, head_dim]: each row's past, then its new
// slots, then padding.
// The session host lays out each distinct past once; a Gather by row runs only when
// rows share one (below): always on, it was one more copy of the whole past per pass,
// also for a decode step whose rows each continue their own (onnxruntime's profiler:
// 7 ms of a 47 ms pass at a 1900-token past).
// Each row's new tokens go right after its own past, not after the pass's longest: the
// CPU kernels' sums over key slots round differently when masked slots sit between
// keys (measured: a decode row next to a longer one differed from the same row alone
// in 4,229 of 32,000 log-probs with 3 slots between, none with 8); padding after a
// row's last key changes nothing.
// The scatter only when some row's past is shorter than the pass's: it copies all keys
// once more (measured: a 1900-token decode pass 34 ms with it, 25 ms behind the If).
// Rows of different pasts laid out with room for their new slots (the runner asks for it)
// get them written into that room: one copy of the keys where Concat + ScatterElements
// made two (16 streams from prompts of 17–47 tokens: 14–23 ms of a 70–86 ms step).
// Each branch makes its own Concat, so no branch hands out a value made outside it.
// Past and recent go into the same Concat: the keys are one copy, however the past came.
// Rows that share a past (continuations of one context) get it by a Gather here, a layer
// at a time, where the session thread laid it out once per row for all layers at once
// (17 continuations of a 400-token context: 2 × 109 MiB, so passes were bounded to 16 MiB
// of past and ran a row or two each).
// A plain pass (every row its own past, none shorter: long blocks, rolling, batch-1
// decode) takes one If and a Concat; the nested Ifs are for the small passes only (an
// If nested in the plain path held one more keys-sized buffer: 16k rolling peak 983–992
// → 1001–1005 MiB).
//   ragged or shared ─If─┬─ else: Concat(past, recent, new) ─► keys
//                        └─ then: shared ─If─┬─ else: roomy ─If─┬─ then: ScatterElements(past) ─►
//                                            │                  └─ else: Concat ─ScatterElements─►
//                                            └─ then: Gather(past_rows) ─► ragged ─If─┬─ Concat ─ScatterElements─►
//                                                                                     └─ Concat ─►
export function placeKv(g: GraphBuilder, past: Past, before: string[], fresh: string, name: string, dims: Parameters<GraphBuilder['ifNode']>[3]): string {
  const append = (parts: string[]) => g.node('Concat', [...parts, fresh], { name: 'append', attrs: { axis: 2 } });
  const scatter = (into: string) => g.node('ScatterElements', [into, past.newSlots, fresh], { name: 'scatter', attrs: { axis: 2 } });
  const rowPasts = () => before.map((t) => g.node('Gather', [t, past.rows], { name: 'row_past', attrs: { axis: 0 } }));
  const layout = past.layout;
  switch (layout.kind) {
    case 'scatter':
      // WebGPU: every If ran as a subgraph that waited for the device, about 1 ms each on
      // an H100; a decode step took three nested ones a layer (ragged: its slots are
      // rounded up to fours) and ran 0.23 s (bench/gpu.js, 2026-11-26). One path fits
      // every pass, at a few more copies of the keys, which a GPU makes in microseconds:
      //   past, recent ─Gather(past_rows)─┐
      //   new ──────────────────────────Concat─Slice(S slots)─ScatterElements(new slots, new)─► keys
      // (a past laid out with room already has S slots: the Slice drops the appended copy,
      // and the scatter writes the new K/V into the room.)
      return g.scope(name, () => {
        const slots = g.node('Slice', [append(rowPasts()), g.ints([0]), layout.keySlots, g.ints([2])], { name: 'key_slots' });
        return scatter(slots);
      });
    case 'branches': {
      const sharedPast = () => {
        const gathered = rowPasts();
        return g.ifNode('placed', layout.ragged, { then: () => [scatter(append(gathered))], else: () => [append(gathered)] }, dims);
      };
      const ownPast = () => g.ifNode('roomy', layout.roomy, { then: () => [scatter(before[0]!)], else: () => [scatter(append(before))] }, dims);
      const [placed] = g.ifNode(
        name,
        layout.special,
        { then: () => g.ifNode('shared', layout.shared, { then: sharedPast, else: ownPast }, dims), else: () => [append(before)] },
        dims,
      );
      return placed!;
    }
  }
}
