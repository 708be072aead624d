// A round of units through the prefix cache:
//
//   units ─► match each in the cache ─► shared trunks? ─yes─► run them into the cache ─┐
//                 ▲                          │ no                                       │
//                 └──────────────────────────┼──────────────────────────────────────────┘
//                                            ▼
//                     each unit's rest against its cached past ─► scores (cached + new)
//
// Every match is pinned while the round needs it and released as it ends; a unit that
// keeps its sequence (a running generation) is handed its pin.
import type { Engine } from '../engine/engine.js';
import { findTrunks, plan, rowKind, type PlanOptions, type ScoreRow, type Trunk } from './planner.js';
import type { Match, PrefixCache } from './prefix-cache.js';
import { emptyScore, runPlan, type PlanResult, type RunOptions, type Work } from './runner.js';
import { maskedFrom, scoredIndex, type Unit, type UnitScore } from './units.js';
import { maxOf } from '../common/sequences.js';

/** Nested sharing levels run into the cache before the rows themselves (a guard: real
 * workloads have two or three — demos, a sample's context). */
const MAX_TRUNK_LEVELS = 16;

export interface RoundSettings {
  planOptions: PlanOptions;
  /** Tokens a stretch shared by several rows must have to get a pass of its own. */
  minSharedTokens: number;
}

/** Score `units` through `cache`: the scores in unit order and the work done. One round at
 * a time per cache (the Scorer's lock): pins and inserts assume it. */
export async function scoreWithCache(
  engine: Engine,
  cache: PrefixCache,
  units: readonly Unit[],
  settings: RoundSettings,
  options: RunOptions,
): Promise<PlanResult> {
  const seqs = units.map((u) => u.prefix.concat(u.tail));
  // A unit with hidden keys shares (and takes from the cache) only what comes before its
  // first mask applies; what follows differs from the plain sequence and never goes into
  // the cache.
  // A probe unit shares its prefix only: its own rows run in its own pass (they return
  // attention statistics a trunk would not).
  const shared = units.map((u, i) => (u.probe ? u.prefix : u.hidden?.length ? seqs[i]!.slice(0, maskedFrom(u)) : seqs[i]!));
  // A link of a long unit counts only its own positions: the links before it requested
  // (and computed) the rest (links.ts).
  const own = (u: Unit) => u.linkedFrom ?? 0;
  const work: Work = { tokensComputed: 0, passes: 0, tokensReused: 0, tokensRequested: seqs.reduce((n, s, i) => n + s.length - own(units[i]!), 0) };
  const pinned: Match[] = [];
  const kept = new Map<number, Match>();
  let matches: Match[] = [];
  const runRows = async (rows: ScoreRow[]) => {
    const result = await runPlan(engine, units, plan(rows, settings.planOptions), options, { cache, pinned, kept });
    work.tokensComputed += result.work.tokensComputed;
    work.passes += result.work.passes;
    return result.scores;
  };
  try {
    let starts: number[];
    let reusedAtStart: number[] = [];
    for (let level = 0; ; level++) {
      matches = shared.map((s) => cache.match(s));
      starts = units.map((u, i) => firstToCompute(cache, u, matches[i]!));
      if (level === 0) reusedAtStart = starts.slice();
      const trunks = level < MAX_TRUNK_LEVELS ? findTrunks(shared, starts, settings.minSharedTokens) : [];
      // A probe that keeps its prefix for later calls computes it into the cache even alone.
      const inTrunk = new Set(trunks.flatMap((t) => t.members));
      units.forEach((u, i) => {
        const start = starts[i]!;
        if (level < MAX_TRUNK_LEVELS && u.probe?.cachePrefix && start < u.prefix.length && !inTrunk.has(i))
          trunks.push({ members: [i], from: start, to: u.prefix.length, spine: i, reach: [u.prefix.length] });
      });
      if (trunks.length === 0) break;
      await runRows(trunks.map((t) => trunkRow(cache, t, units, seqs, matches)));
      for (const m of matches) cache.release(m);
      matches = [];
    }
    const rows: ScoreRow[] = [];
    units.forEach((u, i) => {
      const start = starts[i]!;
      work.tokensReused += Math.max(0, Math.min(start, seqs[i]!.length) - own(u));
      if (start < seqs[i]!.length) rows.push(unitRow(cache, u, i, seqs[i]!, start, matches[i]!));
    });
    const scores = await runRows(rows);
    // Positions before a unit's start come from the cache (its match is still pinned).
    units.forEach((u, i) => {
      const res = (scores[i] ??= emptyScore(u, engine.config.numLayers * engine.config.numHeads));
      if (u.probe) {
        res.prefixReused = Math.min(reusedAtStart[i]!, u.prefix.length);
        return; // its scored positions all lie in its own rows
      }
      fillFromCache(cache, u, matches[i]!, Math.min(starts[i]!, seqs[i]!.length), res);
    });
    // Kept sequences go to their units' outputs, each pin released by whoever holds it.
    for (const [i, m] of kept) {
      let held = true;
      scores[i]!.kept = {
        release: () => {
          if (!held) return;
          held = false;
          cache.release(m);
          cache.evict();
        },
      };
    }
    kept.clear();
    return { scores, work };
  } finally {
    for (const m of kept.values()) cache.release(m); // a round that failed hands none out
    for (const m of matches) cache.release(m);
    for (const m of pinned) cache.release(m);
    cache.settle();
    cache.evict();
  }
}

/** The first input position of `unit` to compute: its cached KV ends there, or a scored
 * position there has no cached score; its length when everything is cached. */
function firstToCompute(cache: PrefixCache, unit: Unit, match: Match): number {
  // A probe needs its own rows run: at most its prefix comes from the cache.
  if (unit.probe) return Math.min(match.depth, unit.prefix.length);
  const n = unit.prefix.length + unit.tail.length;
  // A generation step's distribution is computed, never read from the cache.
  const last = unit.next ? n - 1 : n;
  const kv = Math.min(match.depth, last);
  for (let j = 0; j < unit.targets.length; j++) {
    const pos = unit.prefix.length + scoredIndex(unit, j);
    if (pos >= match.depth || !cache.hasScore(match, pos, unit.targets[j]!, unit.topK)) return Math.min(pos, kv);
  }
  // Every target cached: nothing left to compute; a step still computes what the cache
  // does not hold and its last token.
  return unit.next ? kv : n;
}

/** A unit's row: its sequence from `start`, the positions before it from the cache. */
function unitRow(cache: PrefixCache, u: Unit, i: number, seq: number[], start: number, match: Match): ScoreRow {
  const first = Math.max(start, u.prefix.length);
  return {
    unit: i,
    tokens: seq.slice(start),
    startPosition: start,
    scoredFrom: first - start,
    targetFrom: first - u.prefix.length,
    targetCount: seq.length - first,
    pastRow: 0,
    ...(start > 0 ? { cached: cache.pieces(match, start) } : {}),
    // With no budget a row's KV could not stay: do not copy it out of the pass. A
    // probe row's KV is not kept (its prefix is; copying its rows out costs more
    // than a later probe of the same rows would save).
    // A generation step's row is kept whatever it asks: the next step continues it;
    // with `keep`, whatever the budget too.
    ...((cache.budget > 0 || u.keep) && !u.hidden?.length && (!u.probe || u.next) ? { path: seq } : {}),
    ...(u.hidden?.length ? { hidden: u.hidden } : {}),
    ...(u.sequenceLength !== undefined ? { sequenceLength: u.sequenceLength } : {}),
    ...rowKind(u),
  };
}

/** The scores of a unit's targets before `end` (its first computed position), read from
 * its cache match into `res`. */
function fillFromCache(cache: PrefixCache, u: Unit, match: Match, end: number, res: UnitScore): void {
  for (let t = 0; t < u.targets.length && u.prefix.length + scoredIndex(u, t) < end; t++) {
    const pos = u.prefix.length + scoredIndex(u, t);
    const hit = cache.score(match, pos, u.targets[t]!, u.topK)!;
    res.logprobs[t] = hit.logprob;
    res.greedy[t] = hit.greedy;
    if (u.topK > 0) res.topK![t] = hit.topK!;
  }
}

/** A trunk as a row: its tokens after the cached past, every member's scored positions
 * inside it scored into the cache. */
function trunkRow(cache: PrefixCache, t: Trunk, units: readonly Unit[], seqs: number[][], matches: Match[]): ScoreRow {
  const rep = t.spine;
  const seen = new Set<string>();
  const cacheScores: { index: number; target: number }[] = [];
  t.members.forEach((m, j) => {
    const u = units[m]!;
    if (u.probe) return; // shares its prefix only: no scored position in a trunk
    // Only the positions where the member is still on the spine are its own.
    const end = Math.min(t.reach[j]!, seqs[m]!.length);
    for (let k = 0; k < u.targets.length; k++) {
      const pos = u.prefix.length + scoredIndex(u, k);
      if (pos < t.from) continue;
      if (pos >= end) break;
      const target = u.targets[k]!;
      const key = `${pos}:${target}`;
      if (seen.has(key)) continue;
      seen.add(key);
      cacheScores.push({ index: pos - t.from, target });
    }
  });
  cacheScores.sort((a, b) => a.index - b.index || a.target - b.target);
  return {
    tokens: seqs[rep]!.slice(t.from, t.to),
    startPosition: t.from,
    scoredFrom: 0,
    targetFrom: 0,
    targetCount: 0,
    pastRow: 0,
    ...(t.from > 0 ? { cached: cache.pieces(matches[rep]!, t.from) } : {}),
    cacheScores,
    topK: maxOf(
      t.members.map((m) => units[m]!.topK),
      0,
    ),
    path: seqs[rep]!,
  };
}
