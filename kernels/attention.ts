// In-graph attention probes: the reductions of CHARPEval's chunk distribution and of
// RefuteBench's round heatmaps, computed layer by layer inside the graph so that the
// full attention tensor (layers × heads × T × T) never leaves it. At most one layer's
// probabilities, a pooled [T, T] map and small per-bin tensors are alive at a time.
//
// Every key position has a bin (probe inputs): 0..C-1 its chunk, bins − 2 "excluded" (an
// attention sink such as BOS), bins − 1 padding, where bins, a multiple of BIN_GROUP, also
// leaves bins − 3 for the kept mass (every chunk key). Query tokens carry a weight (1 in
// the query chunks, 0 elsewhere).
import type { GraphBuilder } from '../src/graph/builder.js';

/** Bins per group: keys are summed into bins by products of exactly this many bins, so
 * that onnxruntime's CPU MatMul, which splits the key axis into stretches whose length
 * depends on the product's width (1024 keys for up to 16 columns, 512 up to 32, 256 up to
 * 64, then 128), sums a row's keys in the same stretches whatever the pass's bins. */
export const BIN_GROUP = 16;

/** Inputs shared by every layer's probe, made once per graph. */
export interface ProbeInputs {
  keyBin: string; // [B, S] int64 (WebGPU: int32)
  keyBinsOneHot3: string; // [B, S, bins] float
  keyBinsGrouped: string; // [B, NG, S, BIN_GROUP] float: the one-hots in groups of bins (bins = NG · BIN_GROUP)
  massBins: string; // [B, 1, 1, NG, S, BIN_GROUP] float: the one-hots, plus 1 in the kept bin (bins − 3) at every chunk key
  keyExcluded: string; // [B, S] float: 1 at excluded keys, 0 elsewhere
  excludedPenalty: string; // [B, 1, 1, 1, S] float: 2 at excluded keys, 0 elsewhere
  excludedBin: string; // scalar int64: bins − 2
  lastGroup: string; // [1] int64: NG − 1, the group of the kept, excluded and padding bins
  chunkBins: string; // [NG, 1, BIN_GROUP] float: 1 for the chunk bins (below bins − 3), else 0
  excludedBins: string; // [NG, 1, BIN_GROUP] float: 1 for the excluded bin, else 0
  numBins: string; // [1] int64: a multiple of BIN_GROUP (engine/probe-feeds.ts)
  queryRows: string; // [B, kv, G, Q, 1] int64: each sample's own query rows (of the pass's T), then padding (GatherND's indices)
  queryWeight: string; // [B, 1, 1, Q] float: each sample's weight at its rows (0 at padding)
  queryWeightRow: string; // [B, 1, 1, 1, 1, Q] float: the same, as the left side of a product
  rawHeads: string; // [Hr] int64
  rawQueries: string; // [Q] int64
  wantHeatmap: string; // [1] bool: compute the per-row maps the heatmap is made of
  heatRows: HeatRows;
  /** WebGPU: each key's index, float32 [S] (exact below 2^24), for `firstMax`. */
  keyIds?: string;
}

/** How a pass without a heatmap skips its per-row maps: an If (CPU, CUDA), or, on WebGPU,
 * where an If costs a wait for the device, by reducing one row and zeroing it. */
export type HeatRows =
  | { kind: 'if' }
  | {
      kind: 'rows';
      rows: string; // [R] int64: all T query rows with a heatmap, else row 0
      keep: string; // [1] float: 1 with a heatmap, 0 without
    };

//   want_heatmap ─Where(T, 1)─Range─► rows;  want_heatmap ─Cast─► keep
// (T is the graph's size.seq, a host input: the shape of a device tensor is a wait for it.)
function heatRows(g: GraphBuilder, wantHeatmap: string): HeatRows {
  if (g.provider.ifNodes) return { kind: 'if' };
  return g.scope('heat_rows', () => {
    const T = g.node('Squeeze', [g.size('seq'), g.ints([0])], { name: 'rows' });
    const count = g.node('Where', [g.node('Squeeze', [wantHeatmap, g.ints([0])], { name: 'want' }), T, g.int(1)], { name: 'count' });
    return {
      kind: 'rows',
      rows: g.node('Range', [g.int(0), count, g.int(1)], { name: 'ids' }),
      keep: g.cast(wantHeatmap, 'float32', 'bool', 'keep'),
    };
  });
}

/** WebGPU's stand-in for an If on want_heatmap: `maps` of `x`'s heat rows (along `axis`),
 * each times `keep` — every row with a heatmap, one row of zeros without. */
//   x ─Gather(heat rows)─► maps ─·keep─►
export function heatRowMaps(
  g: GraphBuilder,
  heat: HeatRows & { kind: 'rows' },
  x: string,
  axis: number,
  maps: (rows: string) => string[],
  name: string,
): string[] {
  const rows = g.node('Gather', [x, heat.rows], { name: `${name}_rows`, attrs: { axis } });
  return maps(rows).map((m, i) => g.node('Mul', [m, heat.keep], { name: `${name}_kept_${i}` }));
}

export interface LayerProbe {
  votes: string; // [B, H, bins]: query-weighted argmax votes, sinks excluded from the argmax
  sinkVotes: string; // [B, H]: query weight whose overall argmax is an excluded key
  mass: string; // [B, H, bins]: query-weighted attention mass per bin, rows renormalised without sinks
  sinkMass: string; // [B, H]: query-weighted mass on excluded keys
  headMax: string; // [B, R, S]: max over heads (R = T with the heatmap, else 1 row of zeros)
  headSum: string; // [B, R, S]: sum over heads
  raw: string; // [B, Hr, Q, S]: the requested heads and query rows
}

//   key_bin [B,S] ─OneHot(bins)─► [B,S,bins] ─Reshape, Transpose─► [B,NG,S,16]
//   key_bin < bins − 3 ─Cast─·[bin = bins − 3]─+ one-hots─► mass bins [B,1,1,NG,S,16]
//   key_bin = bins − 2 ─Cast─► excluded keys [B,S] ─·2─► excluded penalty [B,1,1,1,S]
//   query_rows [B,Q] ─Unsqueeze─Expand(─Cast int64, WebGPU)─► [B,kv,G,Q,1]
// Made from feeds: the integer ops run on the host side of the graph and hand the device
// bools to cast, so nothing here waits on the device.
export function probeInputs(
  g: GraphBuilder,
  feeds: Record<'keyBin' | 'queryRows' | 'queryWeight' | 'numBins' | 'rawHeads' | 'rawQueries' | 'wantHeatmap', string>,
  heads: { kv: number; group: number },
): ProbeInputs {
  const { keyBin, queryRows, queryWeight, numBins, rawHeads, rawQueries, wantHeatmap } = feeds;
  return g.scope('probe_inputs', () => {
    const bins = g.node('Squeeze', [numBins, g.ints([0])], { name: 'bins_scalar' });
    const excludedBin = g.node('Sub', [bins, g.int(2)], { name: 'excluded_bin' });
    const keptBin = g.node('Sub', [bins, g.int(3)], { name: 'kept_bin' });
    const groups = g.node('Div', [numBins, g.ints([BIN_GROUP])], { name: 'groups' });
    const lastGroup = g.node('Sub', [groups, g.ints([1])], { name: 'last_group' });
    const oneHot = g.oneHot(keyBin, numBins, 'key_bins_onehot', g.indexType);
    const grouped = (x: string, name: string) =>
      g.node('Transpose', [g.node('Reshape', [x, g.ints([0, 0, -1, BIN_GROUP])], { name: `${name}_groups` })], {
        name,
        attrs: { perm: [0, 2, 1, 3] },
      });
    const binIds = g.node('Range', [g.int(0), bins, g.int(1)], { name: 'bin_ids' });
    const isBin = (op: 'Less' | 'Equal', of: string, name: string) => {
      const flat = g.cast(g.node(op, [binIds, of], { name: `is_${name}` }), 'float32', 'bool', `${name}_flat`);
      return g.node('Reshape', [flat, g.ints([-1, 1, BIN_GROUP])], { name });
    };
    const keptColumn = g.cast(g.node('Equal', [binIds, keptBin], { name: 'is_kept_bin' }), 'float32', 'bool', 'kept_bin_column');
    const isChunkKey = g.node('Less', [keyBin, g.cast(keptBin, g.indexType, 'int64', 'kept_bin_index')], { name: 'key_is_chunk' });
    const chunkKeys = g.node('Unsqueeze', [g.cast(isChunkKey, 'float32', 'bool', 'chunk_keys'), g.ints([-1])], { name: 'chunk_keys_3d' });
    const withKept = g.node('Add', [oneHot, g.node('Mul', [chunkKeys, keptColumn], { name: 'kept_column' })], { name: 'mass_bins_flat' });
    const massBins = g.node('Unsqueeze', [grouped(withKept, 'mass_bins_4d'), g.ints([1, 2])], { name: 'mass_bins' });
    const excludedBinOfKeys = g.cast(excludedBin, g.indexType, 'int64', 'excluded_bin_index');
    const keyExcluded = g.cast(g.node('Equal', [keyBin, excludedBinOfKeys], { name: 'key_is_excluded' }), 'float32', 'bool', 'key_excluded');
    const excludedPenalty = g.node('Unsqueeze', [g.node('Mul', [keyExcluded, g.scalar(2)], { name: 'excluded_penalty_2d' }), g.ints([1, 2, 3])], {
      name: 'excluded_penalty',
    });
    const qw = g.node('Unsqueeze', [queryWeight, g.ints([1, 2])], { name: 'query_weight' });
    const rows5 = g.node('Unsqueeze', [queryRows, g.ints([1, 2, 4])], { name: 'query_rows_5d' });
    const expanded = g.node('Expand', [rows5, g.ints([1, heads.kv, heads.group, 1, 1])], { name: 'query_rows_per_head' });
    const rows = g.indexType === 'int64' ? expanded : g.cast(expanded, 'int64', g.indexType, 'query_rows');
    return {
      keyBin,
      keyBinsOneHot3: oneHot,
      keyBinsGrouped: grouped(oneHot, 'key_bins_grouped'),
      massBins,
      keyExcluded,
      excludedPenalty,
      excludedBin,
      lastGroup,
      chunkBins: isBin('Less', keptBin, 'chunk_bins'),
      excludedBins: isBin('Equal', excludedBin, 'excluded_bins'),
      numBins,
      queryRows: rows,
      queryWeight: qw,
      queryWeightRow: g.node('Unsqueeze', [queryWeight, g.ints([1, 2, 3, 4])], { name: 'query_weight_row' }),
      rawHeads,
      rawQueries,
      wantHeatmap,
      heatRows: heatRows(g, wantHeatmap),
      ...(g.provider.argMax ? {} : { keyIds: keyIds(g) }),
    };
  });
}

//   size.total ─Squeeze─Cast(int32)─Range(0, S)─Cast(float32)─► key ids [S]
// (from the host input, like the heat rows: the keys' count read off a device tensor would
// be a wait for it; the int32 Range and the Cast run on the device).
function keyIds(g: GraphBuilder): string {
  return g.scope('key_ids', () => {
    const S = g.cast(g.node('Squeeze', [g.size('total'), g.ints([0])], { name: 'count' }), 'int32', 'int64', 'count_int32');
    const ids = g.node('Range', [g.constant('int32', [], [0]), S, g.constant('int32', [], [1])], { name: 'ids' });
    return g.cast(ids, 'float32', 'int32', 'ids_float');
  });
}

/** The index of each row's first maximum over the last axis, int64, kept as an axis of 1:
 *   cpu, cuda: ArgMax
 *   webgpu:    the builder's firstMaxIndex over the key ids
 * The provider's ArgMax walks a row in one thread: at 8k keys its two a layer took 36 of a
 * probe pass's 145 ms on the device (H100, 2026-11-27), and a row's time grows with its
 * keys. */
export function firstMax(g: GraphBuilder, x: string, keyIds: string | undefined, name: string): string {
  if (!keyIds) return g.node('ArgMax', [x], { name, attrs: { axis: -1, keepdims: 1 } });
  const max = g.scope(name, () => g.node('ReduceMax', [x, g.ints([-1])], { name: 'max', attrs: { keepdims: 1 } }));
  return g.firstMaxIndex(x, max, keyIds, true, name);
}

/** Sum over query tokens, weighted: [B,kv,G,Q(,bins)] → [B,H(,bins)]. */
function sumQueries(g: GraphBuilder, x: string, qw: string, heads: number, withBins: boolean, name: string): string {
  const weighted = g.node('Mul', [x, withBins ? g.node('Unsqueeze', [qw, g.ints([-1])], { name: `${name}_qw` }) : qw], {
    name: `${name}_weighted`,
  });
  const summed = g.node('ReduceSum', [weighted, g.ints([3])], { name: `${name}_sum`, attrs: { keepdims: 0 } });
  return g.node('Reshape', [summed, g.ints(withBins ? [0, heads, -1] : [0, heads])], { name });
}

// One layer's probe, from its probabilities [B, kv, G, T, S] (float32). Votes and mass
// need only the rows each sample weights (its query chunks), gathered first, each
// sample's from the first place on: the argmaxes and the mass MatMul then scan Q rows,
// not T (a 16k-token dialogue probed for its last round: 1/12 of the rows). Every node
// here stays on the device: an index op the GPU provider has no kernel for (int64 Add,
// Equal, OneHot) would run on the CPU and make the pass wait for the device twice a
// layer; on an H100 that wait, 64 times a pass, was most of a 0.3–0.4 s pass, whatever
// its size (bench/gpu.ts, 2026-11-26).
// Mass is a sum of floats, so its bits depend on the order of the additions. A sample's
// own values sit at the same places whatever else shares the pass (its keys from slot 0,
// its query rows from place 0, padding after both, adding exact zeros), and both sums are
// MatMuls whose CPU kernel adds in an order set by those places and by the product's
// shape — a group of BIN_GROUP bins, at least two query rows (engine/probe-feeds.ts) —
// not by the pass's widths: the same bits alone or in any batch. (Votes are counts, exact
// in any order.)
//   probs ─GatherND(each sample's query rows)─► q [B,kv,G,Q,S]
//   q ────────────────────ArgMax─► j* ─GatherND(excluded keys)─► Σ_q w ─► sink_votes [B,H]
//   q − 2·[key excluded] ─ArgMax─► j  ─GatherND(key bin one-hots)─► Σ_q w ─► votes [B,H,bins]
//   q ─MatMul(mass bins)─► row mass [..,NG,Q,16] ─÷ kept (chunk bins), as is (excluded)─► w · ─► mass [B,H,bins]
//                                                      └ its excluded bin ─► sink_mass [B,H]
//   probs ─If(want heatmap)─ReduceMax / ReduceSum over heads─► [B,T,S]   (pooled across layers by the caller)
//                    └ else zeros [B,1,S]: a pass without heatmap (scoring, skip_heatmap) skips both reductions
//   probs ─Reshape [B,H,T,S]─Gather(heads)─Gather(queries)─► raw [B,Hr,Q,S]
export function layerProbe(g: GraphBuilder, probs: string, p: ProbeInputs, heads: number): LayerProbe {
  return g.scope('probe', () => {
    const queried = g.node('GatherND', [probs, p.queryRows], { name: 'query_rows', attrs: { batch_dims: 3 } });
    // Row by row, what `perKey` [B,S,..] holds at the row's argmax key: [B,kv,G,Q,..].
    // ArgMax keeps the first of equal maxima, as the reference does. The kept argmax
    // subtracts 2 from excluded keys' probabilities (at most 1): the argmax over the rest.
    const atArgmax = (x: string, perKey: string, name: string) =>
      g.node('GatherND', [perKey, firstMax(g, x, p.keyIds, name)], {
        name: `${name}_at`,
        attrs: { batch_dims: 1 },
      });
    const isSink = atArgmax(queried, p.keyExcluded, 'argmax');
    const sinkVotes = sumQueries(g, isSink, p.queryWeight, heads, false, 'sink_votes');
    const keptOnly = g.node('Sub', [queried, p.excludedPenalty], { name: 'kept_only' });
    const voteOneHot = atArgmax(keptOnly, p.keyBinsOneHot3, 'kept_argmax');
    const votes = sumQueries(g, voteOneHot, p.queryWeight, heads, true, 'votes');

    const rows6 = g.node('Unsqueeze', [queried, g.ints([3])], { name: 'query_rows_6d' });
    const rowMass = g.node('MatMul', [rows6, p.massBins], { name: 'row_mass' }); // [B,kv,G,NG,Q,16]
    const lastGroup = g.node('Gather', [rowMass, p.lastGroup], { name: 'row_last_group', attrs: { axis: 3 } });
    const kept = g.node('Gather', [lastGroup, g.ints([BIN_GROUP - 3])], { name: 'row_kept_mass', attrs: { axis: 5 } });
    const keptSafe = g.node('Max', [kept, g.scalar(1e-30)], { name: 'row_kept_safe' });
    const keptMass = g.node('Mul', [rowMass, p.chunkBins], { name: 'row_chunk_mass' });
    const renormalised = g.node('Div', [keptMass, keptSafe], { name: 'row_mass_renormalised' });
    const sink = g.node('Mul', [rowMass, p.excludedBins], { name: 'row_sink_mass' });
    const perRow = g.node('Add', [renormalised, sink], { name: 'row_mass_and_sink' });
    const summed = g.node('MatMul', [p.queryWeightRow, perRow], { name: 'mass_sum' }); // [B,kv,G,NG,1,16]
    const mass = g.node('Reshape', [summed, g.ints([0, heads, -1])], { name: 'mass' });
    const sinkMass = g.node('Gather', [mass, p.excludedBin], { name: 'sink_mass', attrs: { axis: -1 } });

    // Both reductions read every head's probabilities: 2 × 98 ms for a 1024-row block over
    // 15k keys (8 heads, 2 threads), a fifth of a 16k-token probe; a pass that will not
    // build a heatmap skips them.
    const rowMap = { dtype: 'float32' as const, dims: ['batch', 'heat_rows', 'total'] };
    const headMaps = (of: string) => [
      g.node('ReduceMax', [of, g.ints([1, 2])], { name: 'head_max', attrs: { keepdims: 0 } }),
      g.node('ReduceSum', [of, g.ints([1, 2])], { name: 'head_sum', attrs: { keepdims: 0 } }),
    ];
    const heat = p.heatRows;
    const [headMax, headSum] = (
      heat.kind === 'rows'
        ? heatRowMaps(g, heat, probs, 3, headMaps, 'head_maps') // WebGPU: no If
        : g.ifNode(
            'head_maps',
            p.wantHeatmap,
            {
              then: () => headMaps(probs),
              else: () => {
                const dims = g.node('Shape', [probs], { name: 'probs_shape' });
                const bs = g.node('Gather', [dims, g.ints([0, 4])], { name: 'batch_keys', attrs: { axis: 0 } });
                const shape = g.node('Concat', [g.node('Slice', [bs, g.ints([0]), g.ints([1])], { name: 'batch' }), g.ints([1]), g.node('Slice', [bs, g.ints([1]), g.ints([2])], { name: 'keys' })], {
                  name: 'one_row_shape',
                  attrs: { axis: 0 },
                });
                const zeros = g.zeros(shape);
                return [zeros, zeros];
              },
            },
            [rowMap, rowMap],
          )
    ) as [string, string];

    const ts = g.node('Shape', [probs], { name: 'probs_shape', attrs: { start: 3 } });
    const shape4 = g.node('Concat', [g.ints([0, heads]), ts], { name: 'heads_layout', attrs: { axis: 0 } });
    const byHead = g.node('Reshape', [probs, shape4], { name: 'probs_by_head' });
    const someHeads = g.node('Gather', [byHead, p.rawHeads], { name: 'raw_heads', attrs: { axis: 1 } });
    const raw = g.node('Gather', [someHeads, p.rawQueries], { name: 'raw', attrs: { axis: 2 } });
    return { votes, sinkVotes, mass, sinkMass, headMax, headSum, raw };
  });
}

export interface HeatmapOutputs {
  keyMax: string; // [B, T, bins]: max over each bin's keys of the pooled map
  keySum: string; // [B, T, bins]: sum over each bin's keys
}

// Reduce a pooled [B, T, S] map over each key bin, for every query token:
//   pooled ─ScatterElements(key bin, max)─► key_max [B,T,bins]
//   pooled ─MatMul(key one-hots in groups)─Transpose─Reshape─► key_sum [B,T,bins]
// (groups of BIN_GROUP bins, as the mass: a row's sums whatever the pass's bins). The
// query side (T → segments) is a reduction of these small tensors, done by the caller.
export function heatmapKeys(
  g: GraphBuilder,
  pooled: string,
  keyBin: string,
  keyBinsGrouped: string,
  numBins: string,
  name: string,
): HeatmapOutputs {
  return g.scope(name, () => {
    const shape = g.node('Shape', [pooled], { name: 'pooled_shape', attrs: { end: 2 } });
    const outShape = g.node('Concat', [shape, numBins], { name: 'out_shape', attrs: { axis: 0 } });
    const zeros = g.zeros(outShape);
    const indices = g.node(
      'Expand',
      [g.node('Unsqueeze', [keyBin, g.ints([1])], { name: 'key_bin_3d' }), g.node('Shape', [pooled], { name: 'full_shape' })],
      {
        name: 'key_bin_per_query',
      },
    );
    const keyMax = g.node('ScatterElements', [zeros, indices, pooled], { name: 'key_max', attrs: { axis: 2, reduction: 'max' } });
    const pooled4 = g.node('Unsqueeze', [pooled, g.ints([1])], { name: 'pooled_4d' });
    const groups = g.node('MatMul', [pooled4, keyBinsGrouped], { name: 'key_sum_groups' });
    const byRow = g.node('Transpose', [groups], { name: 'key_sum_rows', attrs: { perm: [0, 2, 1, 3] } });
    const keySum = g.node('Reshape', [byRow, g.ints([0, 0, -1])], { name: 'key_sum' });
    return { keyMax, keySum };
  });
}
