// What one forward pass is asked and what it answers (engine.ts runs it; pass.ts makes its
// feeds and reads its outputs): rows of new tokens continuing a kept past, the positions
// scored, probe rows and what they bring, the KV kept.

/** One row of new tokens, continuing row `pastRow` of the past KV (if any). */
export interface Row {
  tokens: number[];
  /** Absolute position of tokens[0] (= the valid length of its past row). */
  startPosition: number;
  pastRow: number;
  /** Length of the whole sequence this row belongs to (a query block's sequence runs
   * past its end), when positions depend on it (longrope); default: its end. */
  sequenceLength?: number;
  /** Past positions [start, end) this row's queries must not see (a chunk knocked out of
   * attention for every later query, attribution.ts); every range ends at or before
   * `startPosition`. */
  hidden?: KeyRange[];
  /** Attention statistics over this row's queries (a probe row). */
  probe?: RowProbe;
}

/** What a probe row brings: the bin of every key it sees and the weight of each query. */
export interface RowProbe {
  /** Per position from 0 to the row's end (its past, then its tokens): 0..C−1 a chunk,
   * C excluded (an attention sink, its share reported apart). */
  keyBins: number[];
  /** C, this row's chunks (rows of one pass may have different counts). */
  chunks: number;
  /** Per token of the row: its weight as a query. */
  queryWeights: number[];
}

/** Token positions [start, end). */
export interface KeyRange {
  start: number;
  end: number;
}

/** KV cache of a prefix pass (per layer [rows, kv_heads, P, head_dim], right-padded),
 * kept in the session host under `handle` until `Engine.dropPast`. */
export interface PastKV {
  handle: number;
  validLengths: number[];
  length: number;
  /** Zero slots laid out after `length` for the new tokens of the one pass that reads this
   * past (its query width), which writes them in place. */
  room?: number;
}

export interface ScoredPosition {
  row: number;
  index: number; // position within the row's new tokens whose logits are scored
  target: number;
}

/** One forward pass: rows that score, rows that probe, or both. */
export interface ForwardRequest {
  rows: Row[];
  past?: PastKV;
  scored: ScoredPosition[];
  topK: number;
  /** Indices into `scored` whose whole log-prob distribution comes back (`next`): what a
   * generation step samples from. */
  next?: number[];
  keepPresent: boolean;
  /** With probe rows: compute the per-row maps a heatmap is made of. */
  heatmap?: boolean;
  /** With one probe row and no past: raw probabilities of these layers, heads and query rows. */
  raw?: { layers: number[]; heads: number[]; queries: number[] };
}

/** One forward pass as run: scoring only, or with probe rows; its rows and padded tokens. */
export interface PassRecord {
  kind: 'score' | 'probe';
  rows: number;
  tokens: number;
  /** Bytes that crossed session.run: inputs (token ids, positions, masks; the past KV,
   * which a CPU session reads where it lies) and outputs (log-probs, distributions,
   * statistics; the new slots' KV when kept — the past stays where it is). On a GPU each
   * would be a host transfer. */
  bytes: { inputs: number; pastKv: number; outputs: number; presentKv: number };
  /** Wall seconds of the run on the session thread, the hop there and back included: what
   * a benchmark sets against its total to see where the rest of the time went. */
  seconds: number;
}

export interface ForwardResult {
  logprobs: Float32Array;
  greedy: boolean[];
  /** Alternatives per scored position, as run: the k asked, at most the vocabulary. */
  topK: number;
  topkLogprobs?: Float32Array; // [scored, topK]
  topkIds?: BigInt64Array;
  /** [next.length, vocab] log-probs, with `next`. */
  next?: Float32Array;
  present?: PastKV;
  /** With probe rows: the pass's attention statistics. */
  probe?: PassProbe;
}

/** A pass's attention statistics, every row in the pass's bins: C chunks (C the most of
 * any probe row; a row's own excluded bin is mapped to C), C+1 padding. */
export interface PassProbe {
  /** Query slots per row (the pass's padded row length). */
  T: number;
  bins: number;
  votes: Float32Array; // [B, L, H, bins]
  sinkVotes: Float32Array; // [B, L, H]
  mass: Float32Array; // [B, L, H, bins]
  sinkMass: Float32Array; // [B, L, H]
  /** [B, T, bins] with `heatmap`, else [B, 1, bins] of zeros. */
  heat: Record<'max' | 'mean', { keyMax: Float32Array; keySum: Float32Array }>;
  keyCount: Float32Array;
  raw: Map<number, Float32Array>; // layer → [B, Hr, Q, S]
  /** Keys per row (past + T). */
  S: number;
}
