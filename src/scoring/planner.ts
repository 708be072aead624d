// The pass planner: units in, forward passes out, as plain data. Pure — it runs
// nothing — so the schedule can be read, tested and extended (query blocks, cached
// prefixes) without an engine.
//
//   units ─┬─ no shared prefix ──────────────► score passes (whole input per row, no past)
//          └─ prefix shared by ≥ 2 units ─► prefix pass ─► score passes of their tails
//                                              (past = that prefix pass, row per group)
//
// Rows are packed longest first so that a pass's padded size (rows × longest row) stays
// within the token budget. A row longer than the budget, or whose attention would exceed
// `maxAttentionCells`, runs in query blocks (chunked prefill): consecutive passes of at
// most `maxBatchTokens` query tokens, each against the KV of the blocks before it (kept,
// `keep`, and continued, `past`), sized so that block × keys stays within the cells — so
// blocks shrink as the keys grow, and no pass builds T × T for a long row:
//
//   long row ─► block 0 (keep) ─► block 1 (past 0, keep) ─► … ─► last block (past)
//   long shared prefix ─► prefix blocks likewise ─► score passes of its tails
//   long tail of a shared prefix ─► blocks forking from the prefix's KV
import type { Unit } from './units.js';

export interface PlanOptions {
  /** Padded tokens per forward pass (rows × longest row). */
  maxBatchTokens: number;
  /** Share the KV of a common prefix; off computes every row in full. */
  prefixSharing: boolean;
  /** Attention cells (query rows × key slots, summed over a pass's rows) one layer's
   * attention may hold per head: maxAttentionBytes / (heads × 4). Default: no bound
   * beyond the token budget. */
  maxAttentionCells?: number;
}

/** A pass that only computes KV: one row per distinct prefix (or one block of one). */
export interface PrefixPass {
  kind: 'prefix';
  /** The prefix block this one continues (a long prefix in blocks). */
  past?: number;
  rows: { tokens: number[]; startPosition: number }[];
}

/** One row of a score pass: the tokens run, where they start, which unit's targets they score. */
export interface ScoreRow {
  unit: number;
  tokens: number[];
  /** Absolute position of tokens[0] (the length of its past). */
  startPosition: number;
  /** Index within `tokens` of the first scored position. */
  scoredFrom: number;
  /** Which of the unit's targets this row scores: `targetCount` from `targetFrom` (a row
   * in query blocks scores the targets inside its block). */
  targetFrom: number;
  targetCount: number;
  /** Row of the past KV this row continues (0 without a past). */
  pastRow: number;
}

export interface ScorePass {
  kind: 'score';
  /** Index in `Plan.passes` of the pass whose KV this pass continues. */
  past?: number;
  /** Keep this pass's KV for a later block (one row, in query blocks). */
  keep?: boolean;
  rows: ScoreRow[];
}

export type Pass = PrefixPass | ScorePass;

export interface Plan {
  passes: Pass[];
}

/** Tokens a plan runs through the model (a shared prefix counts once). */
export function planTokens(plan: Plan): number {
  return plan.passes.reduce((n, p) => n + p.rows.reduce((m, r) => m + r.tokens.length, 0), 0);
}

export function plan(units: readonly Unit[], options: PlanOptions): Plan {
  const groups = new Map<string, number[]>();
  const solo: number[] = [];
  units.forEach((unit, i) => {
    if (!options.prefixSharing || unit.prefix.length === 0) return solo.push(i);
    const key = unit.prefix.join(',');
    const list = groups.get(key);
    if (list) list.push(i);
    else groups.set(key, [i]);
  });
  const shared: number[][] = [];
  for (const members of groups.values()) {
    if (members.length >= 2) shared.push(members);
    else solo.push(members[0]!);
  }

  const budget = options.maxBatchTokens;
  const cells = options.maxAttentionCells ?? Infinity;
  // Query rows a block starting after `keys` key slots may have.
  const blockSize = (keys: number) => Math.max(1, Math.min(budget, Math.floor((Math.sqrt(keys * keys + 4 * cells) - keys) / 2)));
  const tooLong = (tokens: number, keys: number) => tokens > budget || tokens * (keys + tokens) > cells;
  const passes: Pass[] = [];
  // Rows without a shared prefix: the whole input in one row, no past; longer than the
  // budget, in query blocks.
  const soloRows = solo.map((i): ScoreRow => {
    const u = units[i]!;
    return wholeRow(i, u.prefix.concat(u.tail), 0, u.prefix.length, u.targets.length);
  });
  const [longRows, shortRows] = split(soloRows, (r) => tooLong(r.tokens.length, 0));
  for (const rows of packByLength(
    shortRows,
    (r) => r.tokens.length,
    Math.min(budget, Math.floor(cells / Math.max(1, ...shortRows.map((r) => r.tokens.length)))) || 1,
  ))
    passes.push({ kind: 'score', rows });
  for (const row of longRows) blocks(passes, row, blockSize, undefined);

  // Shared prefixes: one prefix pass per batch of groups, then their tails against it. A
  // group with a prefix or a tail longer than the budget gets an unpadded prefix of its
  // own (in blocks when long), and each long tail runs in blocks forking from it.
  shared.sort((a, b) => units[a[0]!]!.prefix.length - units[b[0]!]!.prefix.length);
  const isLong = (g: number[]) => {
    const p = units[g[0]!]!.prefix.length;
    return tooLong(p, 0) || g.some((i) => tooLong(units[i]!.tail.length, p));
  };
  const [longGroups, shortGroups] = split(shared, isLong);
  const tailRow = (i: number, pastRow: number): ScoreRow => {
    const u = units[i]!;
    return { ...wholeRow(i, u.tail, u.prefix.length, 0, u.targets.length), pastRow };
  };
  // Tails after a past of `keys` slots: rows × longest × (keys + longest) within the cells.
  const shortTails = (rows: ScoreRow[], past: number, keys: number) => {
    const longest = Math.max(1, ...rows.map((r) => r.tokens.length));
    const tokens = Math.max(1, Math.min(budget, Math.floor(cells / (keys + longest))));
    for (const batch of packByLength(rows, (r) => r.tokens.length, tokens)) passes.push({ kind: 'score', past, rows: batch });
  };
  for (const groupBatch of packByLength(shortGroups, (g) => units[g[0]!]!.prefix.length, budget)) {
    const past = passes.push({ kind: 'prefix', rows: groupBatch.map((g) => ({ tokens: units[g[0]!]!.prefix, startPosition: 0 })) }) - 1;
    shortTails(
      groupBatch.flatMap((g, groupIndex) => g.map((i) => tailRow(i, groupIndex))),
      past,
      Math.max(...groupBatch.map((g) => units[g[0]!]!.prefix.length)),
    );
  }
  for (const group of longGroups) {
    const prefix = units[group[0]!]!.prefix;
    let past: number | undefined;
    for (let start = 0, size = blockSize(0); start < prefix.length; start += size, size = blockSize(start)) {
      past = passes.push({ kind: 'prefix', past, rows: [{ tokens: prefix.slice(start, start + size), startPosition: start }] }) - 1;
    }
    const [longTails, short] = split(
      group.map((i) => tailRow(i, 0)),
      (r) => tooLong(r.tokens.length, prefix.length),
    );
    shortTails(short, past!, prefix.length);
    for (const row of longTails) blocks(passes, row, blockSize, past);
  }
  return { passes };
}

/** A row that scores `count` targets from position `scoredFrom` of `tokens`. */
function wholeRow(unit: number, tokens: number[], startPosition: number, scoredFrom: number, count: number): ScoreRow {
  return { unit, tokens, startPosition, scoredFrom, pastRow: 0, targetFrom: 0, targetCount: count };
}

/** A long row as query blocks, each of `blockSize(keys before it)` tokens and continuing
 * the one before (`past`: what the first block continues, if anything). */
function blocks(passes: Pass[], row: ScoreRow, blockSize: (keys: number) => number, past: number | undefined): void {
  for (let start = 0; start < row.tokens.length;) {
    const end = Math.min(start + blockSize(row.startPosition + start), row.tokens.length);
    const first = Math.max(start, row.scoredFrom); // first scored position in the block
    const scored = Math.max(0, end - first);
    const block: ScoreRow = {
      unit: row.unit,
      tokens: row.tokens.slice(start, end),
      startPosition: row.startPosition + start,
      scoredFrom: first - start,
      pastRow: 0,
      targetFrom: scored > 0 ? row.targetFrom + first - row.scoredFrom : 0,
      targetCount: scored,
    };
    past = passes.push({ kind: 'score', past, keep: end < row.tokens.length, rows: [block] }) - 1;
    start = end;
  }
}

function split<T>(items: T[], test: (item: T) => boolean): [T[], T[]] {
  return [items.filter(test), items.filter((x) => !test(x))];
}

/** Pack items into batches whose padded size (count × longest) stays within `budget`,
 * longest first so rows of similar length share a batch. One item always fits. */
export function packByLength<T>(items: T[], length: (item: T) => number, budget: number): T[][] {
  const sorted = [...items].sort((a, b) => length(b) - length(a));
  const batches: T[][] = [];
  let current: T[] = [];
  let longest = 0;
  for (const item of sorted) {
    const len = Math.max(1, length(item));
    const next = Math.max(longest, len);
    if (current.length > 0 && next * (current.length + 1) > budget) {
      batches.push(current);
      current = [];
      longest = 0;
    }
    current.push(item);
    longest = Math.max(longest, len);
  }
  if (current.length > 0) batches.push(current);
  return batches;
}
