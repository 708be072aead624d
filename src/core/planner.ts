// The pass planner: rows in, forward passes out, as plain data. Pure — it runs nothing —
// so the schedule can be read and tested without an engine.
//
// A row is the tokens one sequence still has to run: from `startPosition`, after a past
// that comes from the prefix cache (`cached`, pieces of kept KV) or is empty. The scorer
// makes the rows (prefix-cache.ts, `findTrunks`); the planner only packs and blocks them.
//
//   rows ─┬─ short ─► score passes, longest first, rows × longest ≤ budget and
//         │           rows × longest × (past + longest) ≤ attention cells
//         └─ long ──► query blocks: block 0 (cached past) ─► block 1 (past: block 0) ─► …
//
// A row longer than the budget, or whose attention would exceed `maxAttentionCells`, runs
// in query blocks (chunked prefill): consecutive passes of at most `maxBatchTokens` query
// tokens, each against the KV of the blocks before it (kept, `keep`, and continued,
// `past`), sized so that block × keys stays within the cells — so blocks shrink as the
// keys grow, and no pass builds T × T for a long row.
//
// A row with hidden keys (attribution's `mask`) that starts before one of its hidden
// ranges ends also runs as blocks, broken at each such end: a pass masks keys for all of
// a row's queries, so each block carries the ranges that ended before it.
import { commonPrefixLength, compareTokens } from '../common/sequences.js';
import type { Piece } from './prefix-cache.js';
import type { KeyRange, Unit } from './units.js';

export interface PlanOptions {
  /** Padded tokens per forward pass (rows × longest row). */
  maxBatchTokens: number;
  /** Attention cells (query rows × key slots, summed over a pass's rows) one layer's
   * attention may hold per head: maxAttentionBytes / (heads × 4). Default: no bound
   * beyond the token budget. */
  maxAttentionCells?: number;
  /** Past slots (distinct pasts × longest past) a pass of rows longer than one token may
   * lay out; default: no bound. */
  maxPastSlots?: number;
}

/** A position scored only into the prefix cache (a shared trunk's row). */
export interface CacheScore {
  index: number;
  target: number;
}

/** One row of a pass: the tokens run, where they start, what they score. */
export interface ScoreRow {
  /** The unit whose targets this row scores; absent for a trunk (scores go to the cache). */
  unit?: number;
  tokens: number[];
  /** Absolute position of tokens[0] (the length of its past). */
  startPosition: number;
  /** Index within `tokens` of the first scored position. */
  scoredFrom: number;
  /** Which of the unit's targets this row scores: `targetCount` from `targetFrom`. */
  targetFrom: number;
  targetCount: number;
  /** Row of the past KV this row continues (0 without a past). */
  pastRow: number;
  /** Length of the whole sequence, when it runs past this row (query blocks). */
  sequenceLength?: number;
  /** The past from the prefix cache: pieces of kept KV, `startPosition` positions in all. */
  cached?: Piece[];
  /** Trunk rows: positions scored into the cache, with top-k of this size. */
  cacheScores?: CacheScore[];
  topK?: number;
  /** The whole sequence this row's tokens continue, when its KV and scores go into the
   * prefix cache (its positions [startPosition, startPosition + tokens.length)). */
  path?: number[];
  /** Keys the row's queries at or after the last range's end do not see. */
  hidden?: KeyRange[];
  /** The unit asks for attention statistics over this row (a probe row). */
  probe?: boolean;
  /** Runs whole in a pass of its own (raw attention slices). */
  alone?: boolean;
}

/** A forward pass: `probe` when some of its rows probe (it then returns attention
 * statistics too; its other rows only score). */
export interface ScorePass {
  kind: 'score' | 'probe';
  /** Index in `Plan.passes` of the pass whose KV this pass continues (query blocks). */
  past?: number;
  /** Keep this pass's KV for a later block (one row, in query blocks). */
  keep?: boolean;
  rows: ScoreRow[];
}

export type Pass = ScorePass;

export interface Plan {
  passes: Pass[];
}

/** Tokens a plan runs through the model. */
export function planTokens(plan: Plan): number {
  return plan.passes.reduce((n, p) => n + p.rows.reduce((m, r) => m + r.tokens.length, 0), 0);
}

/** A unit as one whole row: its input from position 0, its targets scored. */
export function unitRow(unit: Unit, index: number): ScoreRow {
  return {
    unit: index,
    tokens: unit.prefix.concat(unit.tail),
    startPosition: 0,
    scoredFrom: unit.prefix.length,
    targetFrom: 0,
    targetCount: unit.tail.length,
    pastRow: 0,
    ...(unit.hidden?.length ? { hidden: unit.hidden } : {}),
    ...(unit.sequenceLength !== undefined ? { sequenceLength: unit.sequenceLength } : {}),
    ...rowKind(unit),
  };
}

/** What a row of `unit` tells the planner about its kind. */
export function rowKind(unit: Unit): Pick<ScoreRow, 'probe' | 'alone'> {
  if (!unit.probe) return {};
  return { probe: true, ...(unit.probe.raw ? { alone: true } : {}) };
}

const passKind = (rows: readonly ScoreRow[]): Pass['kind'] => (rows.some((r) => r.probe) ? 'probe' : 'score');

/** Units as whole rows, no cache: the plan of a scorer without prefix sharing. */
export function planUnits(units: readonly Unit[], options: PlanOptions): Plan {
  return plan(units.map(unitRow), options);
}

export function plan(rows: readonly ScoreRow[], options: PlanOptions): Plan {
  const budget = options.maxBatchTokens;
  const cells = options.maxAttentionCells ?? Infinity;
  // Query rows a block starting after `keys` key slots may have.
  const blockSize = (keys: number) => Math.max(1, Math.min(budget, Math.floor((Math.sqrt(keys * keys + 4 * cells) - keys) / 2)));
  const tooLong = (r: ScoreRow) =>
    r.tokens.length > budget || r.tokens.length * (r.startPosition + r.tokens.length) > cells || (r.hidden ?? []).some((h) => h.end > r.startPosition);
  const passes: Pass[] = [];
  const [alone, others] = split([...rows], (r) => r.alone === true);
  const [longRows, shortRows] = split(others, tooLong);
  for (const batch of pack(shortRows, budget, cells, options.maxPastSlots ?? Infinity)) passes.push({ kind: passKind(batch), rows: batch });
  for (const row of longRows) blocks(passes, row, blockSize);
  for (const row of alone) passes.push({ kind: passKind([row]), rows: [row] });
  return { passes };
}

/** Pack rows into passes, longest first and, among rows of one length, longest past
 * first (rows of one past together), while rows × longest stays within the budget, rows × longest × (longest past +
 * longest) within the cells, and the pass's padded past (distinct pasts × longest past)
 * at most twice their own and, unless every row is one token, within `pastSlots`. One
 * row always fits. */
function pack(rows: ScoreRow[], budget: number, cells: number, pastSlots: number): ScoreRow[][] {
  // Each row's new keys follow its own past and padding comes after its last key
  // (engine.ts), so rows of any past lengths share a pass and each gets the bits it gets
  // alone (before, the keys of a row with a shorter past sat after padding and its sums
  // rounded differently, so only rows of one past length shared passes: decode steps of
  // sequences of different lengths each ran alone). A pass's distinct pasts are laid out
  // once, each to the longest one's length, hence the bound on padding; rows that share
  // one (continuations of a context) read it there, the graph gathering it per row a layer
  // at a time. The laid-out past is held for the whole pass, hence the slots bound — but
  // not for decode steps, where each further pass reads all the weights again for one
  // token a row.
  // Rows of one past together, so that they share a pass.
  const keys = new Map(rows.map((r) => [r, pastKey(r)]));
  const sorted = [...rows].sort((a, b) => b.tokens.length - a.tokens.length || b.startPosition - a.startPosition || keys.get(a)!.localeCompare(keys.get(b)!));
  const passes: ScoreRow[][] = [];
  let current: ScoreRow[] = [];
  let longest = 0;
  let past = 0;
  let pasts = new Set<string>();
  let ownPast = 0;
  for (const r of sorted) {
    const len = Math.max(1, r.tokens.length);
    const key = keys.get(r)!;
    const isNew = !pasts.has(key);
    const [d, l, p, own] = [pasts.size + (isNew ? 1 : 0), Math.max(longest, len), Math.max(past, r.startPosition), ownPast + (isNew ? r.startPosition : 0)];
    const n = current.length + 1;
    const pastTooLarge = d * p > 2 * own || (l > 1 && d * p > pastSlots);
    if (current.length > 0 && (n * l > budget || n * l * (p + l) > cells || pastTooLarge)) {
      passes.push(current);
      [current, longest, past, ownPast, pasts] = [[], 0, 0, 0, new Set()];
    }
    current.push(r);
    longest = Math.max(longest, len);
    past = Math.max(past, r.startPosition);
    if (!pasts.has(key)) {
      pasts.add(key);
      ownPast += r.startPosition;
    }
  }
  if (current.length > 0) passes.push(current);
  return passes;
}

/** Rows with the same key continue the same cached past (the runner lays it out once). */
export function pastKey(row: ScoreRow): string {
  return (row.cached ?? []).map((p) => `${p.handle}:${p.offset}:${p.count}`).join(',');
}

/** A long row as query blocks, each of `blockSize(keys before it)` tokens; the first
 * continues the row's cached past, each later one the block before. */
function blocks(passes: Pass[], row: ScoreRow, blockSize: (keys: number) => number): void {
  let past: number | undefined;
  // Indices where another hidden range starts to apply.
  const breaks = (row.hidden ?? []).map((h) => h.end - row.startPosition).filter((b) => b > 0);
  for (let start = 0; start < row.tokens.length;) {
    let end = Math.min(start + blockSize(row.startPosition + start), row.tokens.length);
    for (const b of breaks) if (b > start && b < end) end = b;
    const first = Math.max(start, row.scoredFrom); // first scored position in the block
    const scored = Math.max(0, end - first);
    const block: ScoreRow = {
      ...(row.unit !== undefined ? { unit: row.unit } : {}),
      tokens: row.tokens.slice(start, end),
      startPosition: row.startPosition + start,
      scoredFrom: first - start,
      pastRow: 0,
      targetFrom: scored > 0 ? row.targetFrom + first - row.scoredFrom : 0,
      targetCount: row.unit !== undefined ? scored : 0,
    };
    if (start === 0 && row.cached) block.cached = row.cached;
    if (row.cacheScores) block.cacheScores = row.cacheScores.filter((s) => s.index >= start && s.index < end).map((s) => ({ ...s, index: s.index - start }));
    if (row.path) block.path = row.path;
    if (row.topK) block.topK = row.topK;
    if (row.probe) block.probe = true;
    const hidden = (row.hidden ?? []).filter((h) => h.end <= block.startPosition);
    if (hidden.length) block.hidden = hidden;
    // longrope picks its frequencies by the whole sequence's length, not the block's.
    if (end < row.tokens.length) block.sequenceLength = row.sequenceLength ?? row.startPosition + row.tokens.length;
    else if (row.sequenceLength !== undefined) block.sequenceLength = row.sequenceLength;
    past = passes.push({ kind: passKind([block]), past, keep: end < row.tokens.length, rows: [block] }) - 1;
    start = end;
  }
}

function split<T>(items: T[], test: (item: T) => boolean): [T[], T[]] {
  return [items.filter(test), items.filter((x) => !test(x))];
}

/** A stretch of tokens several sequences share, to compute once into the prefix cache:
 * positions [from, to) of `sequences[spine]`; member `members[j]` follows it up to
 * `reach[j]` (≥ the stretch all members share). */
export interface Trunk {
  members: number[];
  from: number;
  to: number;
  spine: number;
  reach: number[];
}

/** The outermost shared stretches worth a pass of their own: sequences sorted, every
 * group with a common prefix of length ℓ whose members still need positions from `a`
 * (the smallest of their `starts`) on gives a trunk from a when ℓ − a ≥ `minShared`;
 * otherwise its subgroups are tried. The trunk runs on along the two members that share
 * the most (its spine) to where they part: every token of it is needed by at least two
 * sequences, and the members that leave it earlier find their branch point cached — so
 * a sample and its variants that each change one chunk (attribution) take two levels,
 * not one per chunk. Nested sharing that is not on a spine comes out one level per call:
 * the caller runs a level into the cache and asks again. `starts[i]` ≥
 * `sequences[i].length` means nothing left to compute. */
export function findTrunks(sequences: readonly (readonly number[])[], starts: readonly number[], minShared: number): Trunk[] {
  const order = sequences.map((_, i) => i).filter((i) => starts[i]! < sequences[i]!.length);
  order.sort((a, b) => compareTokens(sequences[a]!, sequences[b]!));
  // lcp[k]: common prefix of order[k-1] and order[k].
  const lcp = order.map((i, k) => (k === 0 ? 0 : commonPrefixLength(sequences[order[k - 1]!]!, sequences[i]!)));
  const trunks: Trunk[] = [];
  const visit = (lo: number, hi: number) => {
    if (hi - lo < 2) return;
    let shared = Infinity;
    let deepest = lo + 1; // the pair (deepest − 1, deepest) shares the most
    for (let k = lo + 1; k < hi; k++) {
      shared = Math.min(shared, lcp[k]!);
      if (lcp[k]! > lcp[deepest]!) deepest = k;
    }
    const members = order.slice(lo, hi);
    const from = Math.min(...members.map((i) => starts[i]!));
    if (shared - from >= Math.max(1, minShared)) {
      // How far each member follows the spine: the smallest lcp between them in sorted order.
      const reach = members.map((_, j) => {
        const k = lo + j;
        let r = Infinity;
        for (let x = Math.min(k, deepest) + 1; x <= Math.max(k, deepest); x++) r = Math.min(r, lcp[x]!);
        return Math.min(r, lcp[deepest]!);
      });
      trunks.push({ members, from, to: lcp[deepest]!, spine: order[deepest]!, reach });
      return;
    }
    // Subgroups: split where the common prefix is exactly `shared`.
    let start = lo;
    for (let k = lo + 1; k <= hi; k++) {
      if (k === hi || lcp[k] === shared) {
        visit(start, k);
        start = k;
      }
    }
  };
  visit(0, order.length);
  return trunks;
}
