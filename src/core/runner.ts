// The runner: executes a plan (planner.ts) on the engine and returns every unit's scores
// plus the work done. A pass whose rows continue cached KV gets it laid out as its past
// (identical pasts once); a query block's KV is kept until the next block has run. With a
// prefix cache, each row's new KV and scores go into it as the pass ends.
import type { Engine, KvPiece, PassProbe, PastKV, Row, ScoredPosition } from '../engine/engine.js';
import { CancelledError } from '../common/errors.js';
import { maxOf } from '../common/sequences.js';
import { pastKey, planTokens, type Plan, type ScorePass, type ScoreRow } from './planner.js';
import type { Match, Piece, PrefixCache, ScoreEntry } from './prefix-cache.js';
import { unitTokens, type ProbeSums, type TopK, type Unit, type UnitScore } from './units.js';

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
  /** The inserted sequence of each unit with `keep` (its last row's): pinned until the
   * caller hands it out or releases it. */
  kept: Map<number, Match>;
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
    work: {
      tokensComputed: planTokens(plan),
      passes: plan.passes.length,
      tokensReused: 0,
      tokensRequested: units.reduce((n, u) => n + unitTokens(u), 0),
    },
  };
}

/** The pass's cached pasts laid out as one KV, identical ones once. */
async function gatherRows(engine: Engine, rows: ScoreRow[]): Promise<{ past: PastKV; pastRows: number[] }> {
  const distinct = new Map<string, number>();
  const lists: KvPiece[][] = [];
  const pastRows = rows.map((r) => {
    const key = pastKey(r);
    let at = distinct.get(key);
    if (at === undefined) {
      at = lists.push((r.cached ?? []).map((p: Piece) => ({ handle: p.handle, row: 0, offset: p.offset, count: p.count }))) - 1;
      distinct.set(key, at);
    }
    return at;
  });
  // Read by this pass only: the engine may lay it out with room for the pass's new slots.
  return { past: await engine.gatherPast(lists, rows), pastRows };
}

/** Where one scored position's answer goes. */
interface Destination {
  row: number;
  position: number;
  target: number;
  unit?: number;
  targetIndex: number;
  /** A generation step's placeholder: not a score, not for the cache. */
  next?: boolean;
  /** A generation step that reads the top `nextTop` of its row, not the distribution. */
  nextTop?: number;
}

/** What a pass asks the engine to score, and where each answer goes: `scored[n]` is
 * answered into `dest[n]`; `next` lists the generation steps that read their row's whole
 * distribution (their index in `scored`). */
interface Asked {
  scored: ScoredPosition[];
  dest: Destination[];
  next: { unit: number; at: number }[];
}

/** One pass of a plan:
 *
 *   rows ─► positions asked ─► engine.forward ─► answers into units' scores (and entries
 *                                   │             for the cache)
 *                                   └─ present KV ─► into the prefix cache (rows with a path)
 *                                                    kept for the next block, or dropped
 */
async function runScorePass(
  engine: Engine,
  units: readonly Unit[],
  pass: ScorePass,
  past: PastKV | undefined,
  pastRows: number[],
  results: UnitScore[],
  sink: CacheSink | undefined,
): Promise<PastKV | undefined> {
  const asked = positionsAsked(units, pass);
  const toCache = sink !== undefined && pass.rows.some((r) => r.path);
  const out = await engine.forward(forwardInput(units, pass, past, pastRows, asked, toCache));
  const entries = takeAnswers(engine, units, pass, out, asked, results, toCache);
  if (!toCache || !out.present) return out.present;
  return intoCache(engine, units, pass, past, out.present, entries, sink!);
}

/** The positions a pass's rows ask for: each unit's targets inside its row, a generation
 * step's distribution at its last token, a trunk's scores for the cache. */
function positionsAsked(units: readonly Unit[], pass: ScorePass): Asked {
  const scored: ScoredPosition[] = [];
  const dest: Destination[] = [];
  const next: { unit: number; at: number }[] = [];
  pass.rows.forEach((r, row) => {
    if (r.unit !== undefined) {
      const unit = units[r.unit]!;
      // The row covers tail positions [targetFrom, targetFrom + targetCount).
      for (const j of targetsIn(unit, r.targetFrom, r.targetFrom + r.targetCount)) {
        const target = unit.targets[j]!;
        const tail = unit.scored ? unit.scored[j]! : j;
        const index = r.scoredFrom + tail - r.targetFrom;
        scored.push({ row, index, target });
        dest.push({ row, position: r.startPosition + index, target, unit: r.unit, targetIndex: j });
      }
    }
    // A generation step's distribution: the row that ends the unit, at its last token
    // (scored against a placeholder target; only its whole row is read).
    if (r.unit !== undefined && units[r.unit]!.next && r.startPosition + r.tokens.length === unitTokens(units[r.unit]!)) {
      const nextTop = units[r.unit]!.nextTop;
      if (nextTop === undefined) next.push({ unit: r.unit, at: scored.length });
      scored.push({ row, index: r.tokens.length - 1, target: 0 });
      dest.push({
        row,
        position: r.startPosition + r.tokens.length - 1,
        target: 0,
        unit: r.unit,
        targetIndex: -1,
        ...(nextTop === undefined ? { next: true } : { nextTop }),
      });
    }
    for (const s of r.cacheScores ?? []) {
      scored.push({ row, index: s.index, target: s.target });
      dest.push({ row, position: r.startPosition + s.index, target: s.target, targetIndex: -1 });
    }
  });
  return { scored, dest, next };
}

/** The engine's input for a pass: its rows (a probe row with its bins and query weights),
 * the past, the positions asked, top-k, and what the pass keeps or probes. */
function forwardInput(
  units: readonly Unit[],
  pass: ScorePass,
  past: PastKV | undefined,
  pastRows: number[],
  asked: Asked,
  toCache: boolean,
): Parameters<Engine['forward']>[0] {
  const rowTopK = (r: ScoreRow) => (r.unit !== undefined ? Math.max(units[r.unit]!.topK, units[r.unit]!.nextTop ?? 0) : (r.topK ?? 0));
  const probeOf = (r: ScoreRow) => (r.unit !== undefined ? units[r.unit]!.probe : undefined);
  const raw = pass.rows.map(probeOf).find((p) => p?.raw)?.raw;
  return {
    rows: pass.rows.map((r, b): Row => {
      const probe = probeOf(r);
      return {
        tokens: r.tokens,
        startPosition: r.startPosition,
        pastRow: pastRows[b]!,
        ...(r.sequenceLength !== undefined ? { sequenceLength: r.sequenceLength } : {}),
        ...(r.hidden ? { hidden: r.hidden } : {}),
        ...(probe
          ? {
              probe: {
                keyBins: probe.keyBins,
                chunks: probe.chunks,
                queryWeights: probe.queryWeights.slice(r.startPosition, r.startPosition + r.tokens.length),
              },
            }
          : {}),
      };
    }),
    past,
    scored: asked.scored,
    topK: maxOf(pass.rows.map(rowTopK), 0),
    ...(asked.next.length > 0 ? { next: asked.next.map((n) => n.at) } : {}),
    keepPresent: (pass.keep ?? false) || toCache,
    heatmap: pass.rows.some((r) => probeOf(r)?.heatmap),
    ...(raw ? { raw } : {}),
  };
}

type Answers = Awaited<ReturnType<Engine['forward']>>;
type CacheEntries = { position: number; target: number; entry: ScoreEntry; topK?: TopK }[][];

/** A pass's answers into its units' scores (log-probs, greedy, top-k, a step's
 * distribution, probe sums); per row, the entries its cached KV keeps (rows with a path). */
function takeAnswers(
  engine: Engine,
  units: readonly Unit[],
  pass: ScorePass,
  out: Answers,
  asked: Asked,
  results: UnitScore[],
  toCache: boolean,
): CacheEntries {
  if (out.probe) {
    pass.rows.forEach((r, b) => {
      if (r.unit === undefined || !units[r.unit]!.probe) return;
      const unit = units[r.unit]!;
      const res = (results[r.unit] ??= emptyScore(unit, layerHeads(engine)));
      addProbe(res.probe!, out.probe!, b, r, unit, layerHeads(engine));
    });
  }
  const vocab = engine.config.vocabSize;
  asked.next.forEach((n, k) => {
    const res = (results[n.unit] ??= emptyScore(units[n.unit]!, layerHeads(engine)));
    res.next = out.next!.slice(k * vocab, (k + 1) * vocab);
  });
  const entries: CacheEntries = pass.rows.map(() => []);
  // Rows of the top-k outputs are as wide as the engine ran them: k, at most the vocabulary.
  const width = out.topK;
  asked.dest.forEach((d, n) => {
    if (d.next) return;
    const top =
      width > 0
        ? {
            ids: Array.from(out.topkIds!.subarray(n * width, (n + 1) * width), Number),
            logprobs: Array.from(out.topkLogprobs!.subarray(n * width, (n + 1) * width)),
          }
        : undefined;
    if (d.nextTop !== undefined) {
      const res = (results[d.unit!] ??= emptyScore(units[d.unit!]!, layerHeads(engine)));
      res.nextTop = { ids: top!.ids.slice(0, d.nextTop), logprobs: top!.logprobs.slice(0, d.nextTop) };
      return;
    }
    const entry = { logprob: out.logprobs[n]!, greedy: out.greedy[n]! };
    if (d.unit !== undefined) {
      const unit = units[d.unit]!;
      const res = (results[d.unit] ??= emptyScore(unit, layerHeads(engine)));
      res.logprobs[d.targetIndex] = entry.logprob;
      res.greedy[d.targetIndex] = entry.greedy;
      if (unit.topK > 0) res.topK![d.targetIndex] = { ids: top!.ids.slice(0, unit.topK), logprobs: top!.logprobs.slice(0, unit.topK) };
    }
    // Only rows whose KV goes into the cache keep their scores there.
    if (toCache && pass.rows[d.row]!.path)
      entries[d.row]!.push({ position: d.position, target: d.target, entry, ...(top ? { topK: top } : {}) });
  });
  return entries;
}

/** A pass's new KV into the prefix cache, a segment per row with a path, with the row's
 * entries; the present KV is returned when the next block continues it, else dropped. */
async function intoCache(
  engine: Engine,
  units: readonly Unit[],
  pass: ScorePass,
  past: PastKV | undefined,
  present: PastKV,
  entries: CacheEntries,
  sink: CacheSink,
): Promise<PastKV | undefined> {
  try {
    // Each row's new KV as a segment of its own, all in one round trip (a decode round
    // inserts a row per running sequence). A row whose past came in many pieces (a
    // sequence grown a token at a time) goes in whole, its path then read as one piece;
    // so does a row that will be continued (a running generation) whose pieces after the
    // first hold many slots (a prompt run in query blocks, a dialogue's new turn): the
    // session thread feeds a row's first piece as it lies and copies only the rest
    // (session.ts). A row's new slots follow its own past (engine.ts).
    const inserted = pass.rows.flatMap((r, b) => (r.path && r.tokens.length > 0 ? [b] : []));
    const whole = (b: number) => {
      const r = pass.rows[b]!;
      const pieces = r.cached ?? [];
      if (past === undefined || pieces.length < 2) return false;
      const continued = r.unit !== undefined && units[r.unit]!.keep === true;
      return pieces.length >= COMPACT_PIECES || (continued && pieces.slice(1).reduce((n, p) => n + p.count, 0) >= COMPACT_SLOTS);
    };
    const segments = await engine.gatherPasts(
      inserted.map((b) => {
        const r = pass.rows[b]!;
        const own = present.validLengths[b]! - r.tokens.length;
        const from = whole(b) ? 0 : own;
        return [[{ handle: present.handle, row: b, offset: from, count: own + r.tokens.length - from }]];
      }),
    );
    for (const [k, b] of inserted.entries()) {
      const r = pass.rows[b]!;
      const segment = segments[k]!;
      const match = sink.cache.insert(
        r.path!,
        r.startPosition,
        r.tokens.length,
        segment.handle,
        whole(b) ? r.startPosition : 0,
        entries[b]!,
      );
      if (match && whole(b) && match.nodes.at(-1)!.segment?.handle === segment.handle) sink.cache.rebase(match);
      // A trunk's KV stays pinned for the rest of the round: its members continue it.
      if (match && r.unit === undefined) sink.pinned.push(match);
      else if (match && units[r.unit!]!.keep) {
        // A later block of the unit extends what an earlier one inserted.
        const earlier = sink.kept.get(r.unit!);
        if (earlier) sink.cache.release(earlier);
        sink.kept.set(r.unit!, match);
      } else if (match) sink.cache.release(match);
    }
  } catch (e) {
    // Nobody else holds the pass's KV yet: it would stay in the session thread for good.
    engine.dropPast(present);
    throw e;
  }
  sink.cache.evict();
  if (!pass.keep) {
    engine.dropPast(present);
    return undefined;
  }
  return present;
}

/** Pieces a row's cached past may come in before the row goes into the cache whole. */
const COMPACT_PIECES = 16;
/** Slots after its first piece a continued row's past may have before it goes in whole:
 * each pass copies them, a compaction copies the whole row once. */
const COMPACT_SLOTS = 64;

/** A unit's answer before its scores arrive (a unit's positions may come from several
 * passes and from the cache). */
export function emptyScore(unit: Unit, layerHeads: number): UnitScore {
  const n = unit.targets.length;
  return {
    logprobs: new Array(n),
    greedy: new Array(n),
    ...(unit.topK > 0 ? { topK: new Array(n) } : {}),
    ...(unit.probe ? { probe: emptySums(unit, layerHeads) } : {}),
  };
}

/** Indices of the unit's targets whose tail positions lie in [from, to). */
function targetsIn(unit: Unit, from: number, to: number): number[] {
  if (!unit.scored) return Array.from({ length: Math.max(0, to - from) }, (_, k) => from + k);
  const out: number[] = [];
  let lo = 0;
  let hi = unit.scored.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (unit.scored[mid]! < from) lo = mid + 1;
    else hi = mid;
  }
  for (let j = lo; j < unit.scored.length && unit.scored[j]! < to; j++) out.push(j);
  return out;
}

function emptySums(unit: Unit, layerHeads: number): ProbeSums {
  const bins = unit.probe!.chunks + 2;
  const T = unit.prefix.length + unit.tail.length;
  const rows = unit.probe!.heatmap ? T * bins : 0;
  const f = (n: number) => new Float32Array(n);
  return {
    bins,
    votes: f(layerHeads * bins),
    sinkVotes: f(layerHeads),
    mass: f(layerHeads * bins),
    sinkMass: f(layerHeads),
    heat: { max: { keyMax: f(rows), keySum: f(rows) }, mean: { keyMax: f(rows), keySum: f(rows) } },
    keyCount: f(rows),
    raw: new Map(),
  };
}

/** Add row `b` of a pass's probe outputs to its unit's sums: votes and mass are sums over
 * query rows (they add up across blocks); heatmap rows go to their positions; the pass's
 * bins map back to the unit's (its excluded bin was the pass's C). */
function addProbe(sums: ProbeSums, out: PassProbe, b: number, r: ScoreRow, unit: Unit, layerHeads: number): void {
  const own = sums.bins;
  const C = own - 2;
  const passBins = out.bins;
  const binOf = (u: number) => (u === C ? passBins - 2 : u); // own bin → pass bin
  for (let lh = 0; lh < layerHeads; lh++) {
    const from = (b * layerHeads + lh) * passBins;
    for (let u = 0; u <= C; u++) {
      sums.votes[lh * own + u]! += out.votes[from + binOf(u)]!;
      sums.mass[lh * own + u]! += out.mass[from + binOf(u)]!;
    }
    sums.sinkVotes[lh]! += out.sinkVotes[b * layerHeads + lh]!;
    sums.sinkMass[lh]! += out.sinkMass[b * layerHeads + lh]!;
  }
  const probe = unit.probe!;
  if (probe.heatmap) {
    for (let t = 0; t < r.tokens.length; t++) {
      const at = (r.startPosition + t) * own;
      const src = (b * out.T + t) * passBins;
      for (let u = 0; u <= C; u++) {
        for (const pool of ['max', 'mean'] as const) {
          sums.heat[pool].keyMax[at + u] = out.heat[pool].keyMax[src + binOf(u)]!;
          sums.heat[pool].keySum[at + u] = out.heat[pool].keySum[src + binOf(u)]!;
        }
        sums.keyCount[at + u] = out.keyCount[src + binOf(u)]!;
      }
    }
  }
  if (probe.raw) {
    // [B, Hr, Q, S] → this row's [Hr, Q, tokens]: the keys past the sample are padding.
    const Hr = probe.raw.heads.length;
    const Q = probe.raw.queries.length;
    const keys = unit.prefix.length + unit.tail.length;
    for (const [layer, data] of out.raw) {
      const slice = new Float32Array(Hr * Q * keys);
      for (let hq = 0; hq < Hr * Q; hq++) slice.set(data.subarray((b * Hr * Q + hq) * out.S, (b * Hr * Q + hq) * out.S + keys), hq * keys);
      sums.raw.set(layer, slice);
    }
  }
}

/** Layers × heads: the rows of a probe unit's per-head sums. */
function layerHeads(engine: Engine): number {
  return engine.config.numLayers * engine.config.numHeads;
}
