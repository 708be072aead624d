// The probe inputs of a forward pass (engine.ts): each probe row's keys in the pass's
// bins and its queries' weights, or, for a pass that only scores, idle inputs on which the
// probe nodes cost next to nothing; and the outputs a probing pass fetches.
import type { HostTensor } from './session-host.js';
import type { ForwardRequest, Row } from './pass-types.js';
import { BIN_GROUP } from '../../kernels/attention.js';

const int64 = (data: BigInt64Array, dims: number[]): HostTensor => ({ type: 'int64', data, dims });

/** The probe inputs of a pass that only scores: one query row of weight 0 a row, every
 * key in bin 0, no heatmap, no raw slices — the probe nodes then work on a single row. */
export function idleProbeFeeds(B: number, S: number): Record<string, HostTensor> {
  // Fresh arrays each: feeds are transferred to the session worker, each buffer once.
  const none = () => int64(new BigInt64Array(0), [0]);
  return {
    key_bin: int64(new BigInt64Array(B * S), [B, S]),
    query_rows: int64(new BigInt64Array(B), [B, 1]),
    query_weight: { type: 'float32', data: new Float32Array(B), dims: [B, 1] },
    num_bins: int64(BigInt64Array.of(BigInt(BIN_GROUP)), [1]),
    raw_heads: none(),
    raw_queries: none(),
    want_heatmap: { type: 'bool', data: Uint8Array.of(0), dims: [1] },
  };
}

/** The probe inputs of a pass with probe rows. Every row's keys in the pass's bins
 * (probeBins: a row's own excluded bin moves to bins − 2, padding and the keys of rows
 * that only score go to bins − 1); each row's own query rows, the rows it weights, in
 * order from the first place of `query_rows` on, then padding of weight 0 (votes and mass
 * scan only these). A row's rows thus sit at the same places, and its sums run over the
 * same values in the same order, whatever else the pass holds (kernels/attention.ts). At
 * least two places: a product of one query row takes another onnxruntime kernel, which
 * sums in another order. */
export function probeFeeds(req: ForwardRequest, P: number, T: number): Record<string, HostTensor> {
  const B = req.rows.length;
  const S = P + T;
  const bins = probeBins(req.rows);
  const excluded = bins - 2;
  const keyBin = new BigInt64Array(B * S).fill(BigInt(bins - 1));
  const ownRows: number[][] = req.rows.map(() => []);
  req.rows.forEach((row, b) => {
    const probe = row.probe;
    if (!probe) return;
    probe.queryWeights.forEach((w, t) => w !== 0 && t < row.tokens.length && ownRows[b]!.push(t));
    const valid = req.past?.validLengths[row.pastRow] ?? 0;
    const bin = (j: number) => (probe.keyBins[j] === probe.chunks ? excluded : probe.keyBins[j]!);
    const set = (slot: number, j: number) => (keyBin[b * S + slot] = BigInt(bin(j)));
    for (let j = 0; j < valid; j++) set(j, j);
    for (let t = 0; t < row.tokens.length; t++) set(valid + t, row.startPosition + t);
  });
  const Q = Math.max(2, ...ownRows.map((r) => r.length));
  const queryRows = new BigInt64Array(B * Q);
  const queryWeight = new Float32Array(B * Q);
  req.rows.forEach((row, b) =>
    ownRows[b]!.forEach((t, q) => {
      queryRows[b * Q + q] = BigInt(t);
      queryWeight[b * Q + q] = row.probe!.queryWeights[t]!;
    }),
  );
  const raw = req.raw ?? { layers: [], heads: [], queries: [] };
  const i64 = (values: number[]) => int64(BigInt64Array.from(values, BigInt), [values.length]);
  return {
    key_bin: int64(keyBin, [B, S]),
    query_rows: int64(queryRows, [B, Q]),
    query_weight: { type: 'float32', data: queryWeight, dims: [B, Q] },
    num_bins: i64([bins]),
    raw_heads: i64(raw.heads),
    raw_queries: i64(raw.queries),
    want_heatmap: { type: 'bool', data: Uint8Array.of(req.heatmap ? 1 : 0), dims: [1] },
  };
}

/** The probe graph's outputs a pass with probe rows fetches (besides raw slices). */
export const PROBE_OUTPUTS = [
  'probe.votes',
  'probe.sink_votes',
  'probe.mass',
  'probe.sink_mass',
  'heat.key_count',
  'heat.max.key_max',
  'heat.max.key_sum',
  'heat.mean.key_max',
  'heat.mean.key_sum',
];

/** Bins of a pass with probe rows, a multiple of BIN_GROUP: the most chunks of any row,
 * then unused bins, then the kept mass (bins − 3: every chunk key, the mass renormalised
 * by), excluded (bins − 2), padding (bins − 1). */
export function probeBins(rows: Row[]): number {
  const needed = 3 + Math.max(0, ...rows.map((r) => r.probe?.chunks ?? 0));
  return Math.ceil(needed / BIN_GROUP) * BIN_GROUP;
}
