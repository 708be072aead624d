// The runner: executes a plan (planner.ts) on the engine and returns every unit's scores
// plus the work done. A pass whose rows continue cached KV gets it laid out as its past
// (identical pasts once); a query block's KV is kept until the next block has run. With a
// prefix cache, each row's new KV and scores go into it as the pass ends.
import type { Engine, KvPiece, PastKV, ScoredPosition } from '../engine.js';
import { CancelledError } from '../errors.js';
import { planTokens, type Plan, type ScorePass, type ScoreRow } from './planner.js';
import type { Match, Piece, PrefixCache, ScoreEntry } from './prefix-cache.js';
import { unitTokens, type TopK, type Unit, type UnitScore } from './units.js';

export interface Work {
  /** Tokens run through the model. */
  tokensComputed: number;
  passes: number;
  /** Input tokens whose KV a unit took from the prefix cache instead of computing. */
  tokensReused: number;
  /** Input tokens of the units (what scoring each alone from scratch would compute). */
  tokensRequested: number;
}

export interface PlanResult {
  scores: UnitScore[];
  work: Work;
}

export interface RunOptions {
  /** Checked between passes: when it says stop, the run ends with CancelledError. */
  shouldStop?: () => boolean;
}

export interface CacheSink {
  cache: PrefixCache;
  /** Where the matches of inserted trunk rows go: pinned until the caller releases them. */
  pinned: Match[];
}

export async function runPlan(
  engine: Engine,
  units: readonly Unit[],
  plan: Plan,
  options: RunOptions = {},
  sink?: CacheSink,
): Promise<PlanResult> {
  const scores: UnitScore[] = new Array(units.length);
  const kept = new Map<number, PastKV>();
  try {
    for (const [i, pass] of plan.passes.entries()) {
      if (options.shouldStop?.()) throw new CancelledError();
      let past = pass.past === undefined ? undefined : kept.get(pass.past);
      let gathered: PastKV | undefined;
      if (past?.gaps) {
        // A one-token block leaves a padding slot after its KV: lay it out without.
        gathered = await engine.gatherPast([[{ handle: past.handle, row: 0, offset: 0, count: past.validLengths[0]! }]]);
        past = gathered;
      }
      let pastRows: number[] = pass.rows.map((r) => r.pastRow);
      if (!past && pass.rows.some((r) => r.cached && r.cached.length > 0)) {
        ({ past: gathered, pastRows } = await gatherRows(engine, pass.rows));
        past = gathered;
      }
      try {
        const present = await runScorePass(engine, units, pass, past, pastRows, scores, sink);
        if (present) kept.set(i, present);
      } finally {
        if (gathered) engine.dropPast(gathered);
      }
      // The block this one continued is no longer needed.
      if (pass.past !== undefined) {
        engine.dropPast(kept.get(pass.past)!);
        kept.delete(pass.past);
      }
    }
  } finally {
    // A run that stopped early still frees the KV it kept.
    for (const past of kept.values()) engine.dropPast(past);
  }
  return {
    scores,
    work: { tokensComputed: planTokens(plan), passes: plan.passes.length, tokensReused: 0, tokensRequested: units.reduce((n, u) => n + unitTokens(u), 0) },
  };
}

/** The pass's cached pasts laid out as one KV, identical ones once. */
async function gatherRows(engine: Engine, rows: ScoreRow[]): Promise<{ past: PastKV; pastRows: number[] }> {
  const distinct = new Map<string, number>();
  const lists: KvPiece[][] = [];
  const pastRows = rows.map((r) => {
    const pieces = r.cached ?? [];
    const key = pieces.map((p) => `${p.handle}:${p.offset}:${p.count}`).join(',');
    let at = distinct.get(key);
    if (at === undefined) {
      at = lists.push(pieces.map((p: Piece) => ({ handle: p.handle, row: 0, offset: p.offset, count: p.count }))) - 1;
      distinct.set(key, at);
    }
    return at;
  });
  return { past: await engine.gatherPast(lists), pastRows };
}

/** Where one scored position's answer goes. */
interface Destination {
  row: number;
  position: number;
  target: number;
  unit?: number;
  targetIndex: number;
}

async function runScorePass(
  engine: Engine,
  units: readonly Unit[],
  pass: ScorePass,
  past: PastKV | undefined,
  pastRows: number[],
  results: UnitScore[],
  sink: CacheSink | undefined,
): Promise<PastKV | undefined> {
  const scored: ScoredPosition[] = [];
  const dest: Destination[] = [];
  pass.rows.forEach((r, row) => {
    if (r.unit !== undefined) {
      const targets = units[r.unit]!.targets;
      for (let j = 0; j < r.targetCount; j++) {
        const target = targets[r.targetFrom + j]!;
        scored.push({ row, index: r.scoredFrom + j, target });
        dest.push({ row, position: r.startPosition + r.scoredFrom + j, target, unit: r.unit, targetIndex: r.targetFrom + j });
      }
    }
    for (const s of r.cacheScores ?? []) {
      scored.push({ row, index: s.index, target: s.target });
      dest.push({ row, position: r.startPosition + s.index, target: s.target, targetIndex: -1 });
    }
  });
  const rowTopK = (r: ScoreRow) => (r.unit !== undefined ? units[r.unit]!.topK : (r.topK ?? 0));
  const topK = Math.max(0, ...pass.rows.map(rowTopK));
  const toCache = sink !== undefined && pass.rows.some((r) => r.path);
  const out = await engine.forward({
    rows: pass.rows.map((r, b) => ({
      tokens: r.tokens,
      startPosition: r.startPosition,
      pastRow: pastRows[b]!,
      ...(r.sequenceLength !== undefined ? { sequenceLength: r.sequenceLength } : {}),
      ...(r.hidden ? { hidden: r.hidden } : {}),
    })),
    past,
    scored,
    topK,
    keepPresent: (pass.keep ?? false) || toCache,
  });
  const entries: { position: number; target: number; entry: ScoreEntry; topK?: TopK }[][] = pass.rows.map(() => []);
  // Rows of the top-k outputs are as wide as the engine ran them: k, at most the vocabulary.
  const width = out.topK;
  dest.forEach((d, n) => {
    const top =
      width > 0
        ? { ids: Array.from(out.topkIds!.subarray(n * width, (n + 1) * width), Number), logprobs: Array.from(out.topkLogprobs!.subarray(n * width, (n + 1) * width)) }
        : undefined;
    const entry = { logprob: out.logprobs[n]!, greedy: out.greedy[n]! };
    if (d.unit !== undefined) {
      const unit = units[d.unit]!;
      const res = (results[d.unit] ??= emptyScore(unit));
      res.logprobs[d.targetIndex] = entry.logprob;
      res.greedy[d.targetIndex] = entry.greedy;
      if (unit.topK > 0) res.topK![d.targetIndex] = { ids: top!.ids.slice(0, unit.topK), logprobs: top!.logprobs.slice(0, unit.topK) };
    }
    // Only rows whose KV goes into the cache keep their scores there.
    if (toCache && pass.rows[d.row]!.path) entries[d.row]!.push({ position: d.position, target: d.target, entry, ...(top ? { topK: top } : {}) });
  });
  if (toCache && out.present) {
    const present = out.present;
    const P = past?.length ?? 0;
    try {
      for (const [b, r] of pass.rows.entries()) {
        if (!r.path || r.tokens.length === 0) continue;
        const segment = await engine.gatherPast([[{ handle: present.handle, row: b, offset: P, count: r.tokens.length }]]);
        const match = sink!.cache.insert(r.path, r.startPosition, r.tokens.length, segment.handle, 0, entries[b]!);
        // A trunk's KV stays pinned for the rest of the round: its members continue it.
        if (match && r.unit === undefined) sink!.pinned.push(match);
        else if (match) sink!.cache.release(match);
      }
    } catch (e) {
      // Nobody else holds the pass's KV yet: it would stay in the session thread for good.
      engine.dropPast(present);
      throw e;
    }
    sink!.cache.evict();
    if (!pass.keep) {
      engine.dropPast(present);
      return undefined;
    }
  }
  return out.present;
}

/** A unit's answer before its scores arrive (a unit's positions may come from several
 * passes and from the cache). */
export function emptyScore(unit: Unit): UnitScore {
  const n = unit.targets.length;
  return { logprobs: new Array(n), greedy: new Array(n), ...(unit.topK > 0 ? { topK: new Array(n) } : {}) };
}
