// The pass planner: units in, forward passes out, as plain data. Pure — it runs
// nothing — so the schedule can be read, tested and extended (query blocks, cached
// prefixes) without an engine.
//
//   units ─┬─ no shared prefix ──────────────► score passes (whole input per row, no past)
//          └─ prefix shared by ≥ 2 units ─► prefix pass ─► score passes of their tails
//                                              (past = that prefix pass, row per group)
//
// Rows are packed longest first so that a pass's padded size (rows × longest row) stays
// within the token budget; one row always fits.
import type { Unit } from './units.js';

export interface PlanOptions {
  /** Padded tokens per forward pass (rows × longest row). */
  maxBatchTokens: number;
  /** Share the KV of a common prefix; off computes every row in full. */
  prefixSharing: boolean;
}

/** A pass that only computes KV: one row per distinct prefix. */
export interface PrefixPass {
  kind: 'prefix';
  rows: { tokens: number[] }[];
}

/** One row of a score pass: the tokens run, where they start, which unit's targets they score. */
export interface ScoreRow {
  unit: number;
  tokens: number[];
  /** Absolute position of tokens[0] (the length of its past). */
  startPosition: number;
  /** Index within `tokens` of the first scored position. */
  scoredFrom: number;
  /** Row of the past KV this row continues (0 without a past). */
  pastRow: number;
}

export interface ScorePass {
  kind: 'score';
  /** Index in `Plan.passes` of the prefix pass whose KV this pass continues. */
  past?: number;
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

  const passes: Pass[] = [];
  // Rows without a shared prefix: the whole input in one row, no past.
  const soloRows = solo.map((i): ScoreRow => {
    const u = units[i]!;
    return { unit: i, tokens: u.prefix.concat(u.tail), startPosition: 0, scoredFrom: u.prefix.length, pastRow: 0 };
  });
  for (const rows of packByLength(soloRows, (r) => r.tokens.length, options.maxBatchTokens)) passes.push({ kind: 'score', rows });

  // Shared prefixes: one prefix pass per batch of groups, then their tails against it.
  shared.sort((a, b) => units[a[0]!]!.prefix.length - units[b[0]!]!.prefix.length);
  for (const groupBatch of packByLength(shared, (g) => units[g[0]!]!.prefix.length, options.maxBatchTokens)) {
    const past = passes.push({ kind: 'prefix', rows: groupBatch.map((g) => ({ tokens: units[g[0]!]!.prefix })) }) - 1;
    const tailRows = groupBatch.flatMap((g, groupIndex) =>
      g.map((i): ScoreRow => {
        const u = units[i]!;
        return { unit: i, tokens: u.tail, startPosition: u.prefix.length, scoredFrom: 0, pastRow: groupIndex };
      }),
    );
    for (const rows of packByLength(tailRows, (r) => r.tokens.length, options.maxBatchTokens)) passes.push({ kind: 'score', past, rows });
  }
  return { passes };
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
