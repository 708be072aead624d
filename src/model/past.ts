// How a pass's cached past and its new tokens' K/V become each layer's keys and values:
// the past inputs, the conditions that pick a layout (computed once, read by every
// layer), and the placement itself. The decoder's attention reads the result.
//
// Inputs (decoder.ts lists them all): past.L.* and recent.L.* [B', kv_heads, P₀ | P₁,
// head_dim] (row b's past: the first past_lengths[b] slots of the two end to end); on CPU
// and CUDA past_lengths [B], past_rows [B], and key_positions [B, S] for the pass's key
// slots; on WebGPU kv_rows [B, 4] and kv_steps [4], where those slots lie (keySources).
import type { GraphBuilder } from '../graph/builder.js';
import { kvDType, type ComputeDType } from '../common/dtypes.js';
import type { ModelConfig } from './families.js';

/** One layer's past, and the pass-wide facts that choose how its keys are laid out. */
export interface Past {
  /** The past's two parts (past, recent), each [B', kv_heads, ·, head_dim]. */
  key: [string, string];
  value: [string, string];
  layout: Layout;
}

/** How keys are laid out: by the If that fits the pass (CPU, CUDA), or by one Gather of
 * rows that fits every pass (WebGPU, where an If costs a wait for the device: `placeKv`). */
export type Layout =
  | {
      kind: 'branches';
      /** [B, kv_heads, T, head_dim] int64: the key slot of each new token's K/V. */
      newSlots: string;
      /** [B] int64: the past row each row continues. */
      rows: string;
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
      kind: 'gather';
      /** [B, kv_heads, S] int32: the row of head_dim values each key slot reads, among the
       * rows of past, recent and the new K/V end to end (`keySources`). */
      sources: string;
      headDim: number;
    };

/** The feeds the CPU and CUDA layouts read (WebGPU's read `kv_rows` and `kv_steps`). */
export interface BranchFeeds {
  inputIds: string;
  keyPositions: string;
  pastLengths: string;
  pastRows: string;
}

/** Declares the past inputs and the pass-wide layout; `layer(i)` gives layer i's past. */
export function pastInputs(g: GraphBuilder, c: ModelConfig, dt: ComputeDType, v: BranchFeeds | undefined): (layer: number) => Past {
  const kvType = kvDType(dt);
  // The past may have fewer rows than the pass (rows sharing one): `past_batch`.
  const kvDims = (part: string) => ['past_batch', c.numKvHeads, part, c.headDim];
  // Every layer's past has the same length: the conditions read it off layer 0's.
  const pastKey0 = g.input('past.0.key', kvType, kvDims('past'));
  const recentKey0 = g.input('recent.0.key', kvType, kvDims('recent'));
  let layout: Layout;
  if (!v) {
    layout = { kind: 'gather', sources: g.scope('model/key_sources', () => keySources(g, c)), headDim: c.headDim };
  } else {
    const newSlots = g.scope('model/new_slots', () => slotsOfNew(g, c, v.inputIds, v.pastLengths));
    const keySlots = () => g.node('Shape', [v.keyPositions], { name: 'key_slots', attrs: { start: 1, end: 2 } });
    layout = { kind: 'branches', newSlots, rows: v.pastRows, ...branchConditions(g, pastKey0, recentKey0, v, keySlots) };
  }
  return (i) => ({
    key: [i === 0 ? pastKey0 : g.input(`past.${i}.key`, kvType, kvDims('past')), i === 0 ? recentKey0 : g.input(`recent.${i}.key`, kvType, kvDims('recent'))],
    value: [g.input(`past.${i}.value`, kvType, kvDims('past')), g.input(`recent.${i}.value`, kvType, kvDims('recent'))],
    layout,
  });
}

// WebGPU: where each key slot of each row and head comes from, once a pass for every layer
// and for keys and values alike. The sources are the rows (of head_dim values) of past,
// recent and the new K/V, end to end; row b's slot s reads
//   s < past_length[b], s < P₀:  past   row (past_row[b]·kv + h)·P₀ + s
//   s < past_length[b], s ≥ P₀:  recent row B'·kv·P₀ + (past_row[b]·kv + h)·P₁ + s − P₀
//   otherwise:                   new    row B'·kv·(P₀+P₁) + (b·kv + h)·T + s − past_length[b]
//                                (past a row's last new token, padding: masked, any row will
//                                do, so clamped to the last)
// The host feeds each row's [past_length, past base, recent base, new base] (`kv_rows`) and
// [P₀, P₁, T, last row] (`kv_steps`): the session thread, which chooses past and recent.
//   s = Range(S) ─┬─ Less(past_length) ─────────────────────────────┐
//                 ├─ Less(P₀) ────────────────────────┐             │
//   past base   + h·P₀ + s ─────────────────────Where─┘─► past rows ─Where─► [B, kv, S]
//   recent base + h·P₁ + s ──────────────────────┘                  │
//   new base    + h·T  + s ─Min(last row)───────────────────────────┘
function keySources(g: GraphBuilder, c: ModelConfig): string {
  const kvRows = g.indexInput('kv_rows', ['batch', 4]);
  const kvSteps = g.indexInput('kv_steps', [4]);
  const column = (t: string, n: number, name: string, axis: number, shape: number[]) =>
    g.nodeN('Split', name, [t, g.ints(new Array<number>(n).fill(1))], { outputs: n, attrs: { axis } }).map((x, i) =>
      g.node('Reshape', [x, g.ints(shape)], { name: `${name}_${i}` }),
    );
  const [pastLength, pastBase, recentBase, newBase] = column(kvRows, 4, 'rows', 1, [-1, 1, 1]) as [string, string, string, string];
  const [p0, p1, t, last] = column(kvSteps, 4, 'steps', 0, [1, 1, 1]) as [string, string, string, string];
  const S = g.cast(g.node('Squeeze', [g.size('total'), g.ints([0])], { name: 'slots' }), 'int32', 'int64', 'slots_int32');
  const s = g.node('Reshape', [g.node('Range', [g.index(0), S, g.index(1)], { name: 'slot' }), g.ints([1, 1, -1])], { name: 'slot_3d' });
  const heads = g.constant('int32', [1, c.numKvHeads, 1], Array.from({ length: c.numKvHeads }, (_, h) => h));
  const rowOf = (base: string, step: string, name: string) =>
    g.node('Add', [g.node('Add', [base, g.node('Mul', [heads, step], { name: `${name}_head_step` })], { name: `${name}_head` }), s], { name });
  const fromPast = g.node('Where', [g.node('Less', [s, p0], { name: 'in_past' }), rowOf(pastBase, p0, 'past_row'), rowOf(recentBase, p1, 'recent_row')], {
    name: 'past_or_recent',
  });
  const fromNew = g.node('Min', [rowOf(newBase, t, 'new_row'), last], { name: 'new_row_clamped' });
  return g.node('Where', [g.node('Less', [s, pastLength], { name: 'is_past' }), fromPast, fromNew], { name: 'sources' });
}

/** The conditions the Ifs of `placeKv` read, computed once for every layer. */
function branchConditions(
  g: GraphBuilder,
  pastKey0: string,
  recentKey0: string,
  v: { inputIds: string; pastLengths: string },
  keySlots: () => string,
): Omit<Layout & { kind: 'branches' }, 'kind' | 'newSlots' | 'rows'> {
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
  return { ragged, shared, special, roomy };
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
  const layout = past.layout;
  switch (layout.kind) {
    case 'gather':
      // WebGPU: every If ran as a subgraph that waited for the device, about 1 ms each on
      // an H100; a decode step took three nested ones a layer and ran 0.23 s (bench/gpu.js,
      // 2026-11-26). One path fits every pass: each key slot's row, wherever it lies
      // (`keySources`, once a pass), gathered from the three sources end to end:
      //   past, recent, new ─gatherRows(sources)─► [B, kv, S, D]   (builder: Reshape, Concat, Gather)
      // Two nodes and two copies of the keys a tensor, where a Gather of the past's rows
      // for each of past and recent, a Concat, a Slice to the pass's slots and a
      // ScatterElements of the new K/V into them were five and four (every node a
      // dispatch the host pays for: about 18 µs each on the H100).
      return g.scope(name, () =>
        g.gatherRows(
          [
            { value: before[0]!, name: 'past_rows' },
            { value: before[1]!, name: 'recent_rows' },
            { value: fresh, name: 'new_rows' },
          ],
          [],
          layout.sources,
          layout.headDim,
        ),
      );
    case 'branches': {
      const append = (parts: string[]) => g.node('Concat', [...parts, fresh], { name: 'append', attrs: { axis: 2 } });
      const scatter = (into: string) => g.node('ScatterElements', [into, layout.newSlots, fresh], { name: 'scatter', attrs: { axis: 2 } });
      const rowPasts = () => before.map((t) => g.node('Gather', [t, layout.rows], { name: 'row_past', attrs: { axis: 0 } }));
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
