// The scorer of one model: its settings, the prefix cache, and scoring units as
// match → plan → run. The batcher calls it; requests are encoded into units above it
// (requests/), and it knows none of their kinds.
//
//   units ─► match each in the cache ─► shared trunks? ─yes─► run them into the cache ─┐
//                 ▲                          │ no                                       │
//                 └──────────────────────────┼──────────────────────────────────────────┘
//                                            ▼
//                     each unit's rest against its cached past ─► scores (cached + new)
import type { Engine } from '../engine/engine.js';
import type { ModelConfig } from '../model/families.js';
import { InvalidArgumentError } from '../common/errors.js';
import { findTrunks, plan, planUnits, rowKind, type Plan, type PlanOptions, type ScoreRow, type Trunk } from './planner.js';
import { PrefixCache, type Match } from './prefix-cache.js';
import { emptyScore, runPlan, type PlanResult, type RunOptions, type Work } from './runner.js';
import { maskedFrom, scoredIndex, type Unit } from './units.js';

export interface ScorerOptions {
  /** Padded tokens per forward pass (rows × longest row); default 512 on CPU, 8192 on CUDA. */
  maxBatchTokens?: number;
  /** Model context length used for truncation and windows; default: the model's. */
  maxLength?: number;
  /** Share the KV cache of a common prefix; off computes every row in full. */
  prefixSharing?: boolean;
  /** Largest top-k a request may ask for. */
  maxTopK?: number;
  /** Bytes of one layer's attention scores a pass may build (default 192 MiB): longer
   * rows run in query blocks that shrink as their keys grow. */
  maxAttentionBytes?: number;
  /** KV bytes of past a pass of rows longer than one token may lay out, each distinct past
   * once (default 8 MiB on the CPU, no bound on CUDA); decode passes are not bounded. */
  maxPastBytes?: number;
  /** KV bytes the prefix cache keeps between rounds (default 1 GiB); 0 shares prefixes
   * within a round only. Needs `prefixSharing`. */
  prefixCacheBytes?: number;
  /** Tokens a stretch shared by several rows of one round must have to get a pass of its
   * own (default 8). */
  minSharedTokens?: number;
}

/** Whether a prefix's KV is the same in every sequence that starts with it: false when
 * rotary values depend on the sequence length (then every row runs whole, uncached). */
export function reusableKv(config: Pick<ModelConfig, 'rope'>): boolean {
  return !config.rope?.dependsOnLength;
}

/** Nested sharing levels run into the cache before the rows themselves (a guard: real
 * workloads have two or three — demos, a sample's context). */
const MAX_TRUNK_LEVELS = 16;

export class Scorer {
  readonly maxLength: number;
  readonly maxBatchTokens: number;
  readonly prefixSharing: boolean;
  readonly maxTopK: number;
  readonly maxAttentionBytes: number;
  readonly maxPastBytes: number;
  readonly minSharedTokens: number;
  /** Absent when prefix sharing is off. */
  readonly cache?: PrefixCache;
  /** Rounds that use the cache run one at a time (pins and inserts assume it). */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    readonly engine: Engine,
    options: ScorerOptions = {},
  ) {
    this.maxLength = options.maxLength ?? engine.config.maxPositions;
    if (this.maxLength > engine.config.maxPositions) {
      throw new InvalidArgumentError('max_length', `${this.maxLength} exceeds the model's ${engine.config.maxPositions} positions`);
    }
    // Measured on the CPU (56M Llama, CHARPEval shapes): 512–1024 tokens per pass beat
    // 4096 by 25–40%, as larger attention and KV-gather tensors fall out of cache. Peak RSS
    // follows the pass (bench/peer.ts, 2 threads, mmap threshold 1 MiB): 512 against 1024
    // took multiple choice from 1.38–1.84 s / 675 MiB to 1.34–1.38 s / 596 MiB and
    // 4 × 1024-token rolling from 2.56–2.71 s / 553–559 MiB to 2.87–2.98 s / 522–531 MiB
    // (llama.cpp: 548). GPUs want large passes.
    this.maxBatchTokens = options.maxBatchTokens ?? (engine.device.kind === 'cpu' ? 512 : 8192);
    this.prefixSharing = options.prefixSharing ?? true;
    this.maxTopK = options.maxTopK ?? 100;
    // Measured with bench/long.ts (32k-token rolling scoring, 8 heads, glibc mmap threshold
    // 1 MiB): peak above the model 2096 MiB / 220 s at 256 MiB, 1965 MiB / 233 s at 192,
    // 1834 MiB / 299 s at 128 (smaller blocks copy the growing KV more often).
    this.maxAttentionBytes = options.maxAttentionBytes ?? 192 * 2 ** 20;
    // Measured with bench/peer.ts's multiple choice (4 × 6 continuations of 400-token
    // contexts, mmap threshold 1 MiB), peak RSS / time, a context's continuations sharing
    // its laid-out past (the graph gathers it per row): 32 MiB 488–491 MiB / 1.57–1.75 s,
    // 16 MiB 480–485 / 1.54–1.83, 8 MiB 427–435 / 1.76–1.87 (llama.cpp 449–456), in-process
    // 1.37–1.54 s at 8 and 1.32–1.51 at 16. Before they shared it (each row's past laid
    // out): no bound 606 / 1.76–1.80, 16 MiB 497 / 1.52–1.59, 8 MiB 470 / 2.11–2.29.
    this.maxPastBytes = options.maxPastBytes ?? (engine.device.kind === 'cpu' ? 8 * 2 ** 20 : Infinity);
    this.minSharedTokens = options.minSharedTokens ?? 8;
    // KV reused across sequences must be what each sequence would compute itself.
    if (this.prefixSharing && !reusableKv(engine.config)) {
      if (options.prefixSharing) throw new InvalidArgumentError('prefix_sharing', `${engine.config.modelType}: positions depend on the sequence length`);
      this.prefixSharing = false;
    }
    if (this.prefixSharing) {
      const budget = options.prefixCacheBytes ?? 2 ** 30;
      this.cache = new PrefixCache(engine.kvBytesPerToken, budget, (handle) => engine.dropPast({ handle, validLengths: [], length: 0 }));
    }
  }

  private get planOptions(): PlanOptions {
    return {
      maxBatchTokens: this.maxBatchTokens,
      maxAttentionCells: Math.floor(this.maxAttentionBytes / (this.engine.config.numHeads * 4)),
      maxPastSlots: Math.floor(this.maxPastBytes / this.engine.kvBytesPerToken),
    };
  }

  /** The passes that score `units` as whole rows, as with a cold cache and nothing
   * shared (pure: nothing runs). */
  plan(units: readonly Unit[]): Plan {
    return planUnits(units, this.planOptions);
  }

  /** Score units: the scores in unit order and the work done. */
  scoreUnits(units: readonly Unit[], options: RunOptions = {}): Promise<PlanResult> {
    const cache = this.cache;
    if (!cache) return runPlan(this.engine, units, this.plan(units), options);
    return this.exclusive(() => this.scoreCached(cache, units, options));
  }

  /** Run `fn` after every earlier user of the cache has finished (pins and inserts assume
   * one at a time). */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn);
    this.queue = run.catch(() => {});
    return run;
  }

  private async scoreCached(cache: PrefixCache, units: readonly Unit[], options: RunOptions): Promise<PlanResult> {
    const seqs = units.map((u) => u.prefix.concat(u.tail));
    // A unit with hidden keys shares (and takes from the cache) only what comes before its
    // first mask applies; what follows differs from the plain sequence and never goes into
    // the cache.
    // A probe unit shares its prefix only: its own rows run in its own pass (they return
    // attention statistics a trunk would not).
    const shared = units.map((u, i) =>
      u.probe ? u.prefix : u.hidden?.length ? seqs[i]!.slice(0, maskedFrom(u)) : seqs[i]!,
    );
    const work: Work = { tokensComputed: 0, passes: 0, tokensReused: 0, tokensRequested: seqs.reduce((n, s) => n + s.length, 0) };
    const pinned: Match[] = [];
    const kept = new Map<number, Match>();
    let matches: Match[] = [];
    const runRows = async (rows: ScoreRow[]) => {
      const result = await runPlan(this.engine, units, plan(rows, this.planOptions), options, { cache, pinned, kept });
      work.tokensComputed += result.work.tokensComputed;
      work.passes += result.work.passes;
      return result.scores;
    };
    try {
      let starts: number[];
      let reusedAtStart: number[] = [];
      for (let level = 0; ; level++) {
        matches = shared.map((s) => cache.match(s));
        starts = units.map((u, i) => this.firstToCompute(cache, u, matches[i]!));
        if (level === 0) reusedAtStart = starts.slice();
        const trunks = level < MAX_TRUNK_LEVELS ? findTrunks(shared, starts, this.minSharedTokens) : [];
        // A probe that keeps its prefix for later calls computes it into the cache even alone.
        const inTrunk = new Set(trunks.flatMap((t) => t.members));
        units.forEach((u, i) => {
          const start = starts[i]!;
          if (level < MAX_TRUNK_LEVELS && u.probe?.cachePrefix && start < u.prefix.length && !inTrunk.has(i))
            trunks.push({ members: [i], from: start, to: u.prefix.length, spine: i, reach: [u.prefix.length] });
        });
        if (trunks.length === 0) break;
        await runRows(trunks.map((t) => this.trunkRow(t, units, seqs, matches)));
        for (const m of matches) cache.release(m);
        matches = [];
      }
      const rows: ScoreRow[] = [];
      units.forEach((u, i) => {
        const start = starts[i]!;
        const seq = seqs[i]!;
        work.tokensReused += Math.min(start, seq.length);
        if (start >= seq.length) return;
        const first = Math.max(start, u.prefix.length);
        rows.push({
          unit: i,
          tokens: seq.slice(start),
          startPosition: start,
          scoredFrom: first - start,
          targetFrom: first - u.prefix.length,
          targetCount: seq.length - first,
          pastRow: 0,
          ...(start > 0 ? { cached: cache.pieces(matches[i]!, start) } : {}),
          // With no budget a row's KV could not stay: do not copy it out of the pass. A
          // probe row's KV is not kept (its prefix is; copying its rows out costs more
          // than a later probe of the same rows would save).
          // A generation step's row is kept whatever it asks: the next step continues it;
          // with `keep`, whatever the budget too.
          ...((cache.budget > 0 || u.keep) && !u.hidden?.length && (!u.probe || u.next) ? { path: seq } : {}),
          ...(u.hidden?.length ? { hidden: u.hidden } : {}),
          ...(u.sequenceLength !== undefined ? { sequenceLength: u.sequenceLength } : {}),
          ...rowKind(u),
        });
      });
      const scores = await runRows(rows);
      // Positions before a unit's start come from the cache (its match is still pinned).
      units.forEach((u, i) => {
        const res = (scores[i] ??= emptyScore(u, this.engine.config.numLayers * this.engine.config.numHeads));
        if (u.probe) {
          res.prefixReused = Math.min(reusedAtStart[i]!, u.prefix.length);
          return; // its scored positions all lie in its own rows
        }
        const end = Math.min(starts[i]!, seqs[i]!.length);
        for (let t = 0; t < u.targets.length && u.prefix.length + scoredIndex(u, t) < end; t++) {
          const pos = u.prefix.length + scoredIndex(u, t);
          const hit = cache.score(matches[i]!, pos, u.targets[t]!, u.topK)!;
          res.logprobs[t] = hit.logprob;
          res.greedy[t] = hit.greedy;
          if (u.topK > 0) res.topK![t] = hit.topK!;
        }
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
  private firstToCompute(cache: PrefixCache, unit: Unit, match: Match): number {
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

  /** A trunk as a row: its tokens after the cached past, every member's scored positions
   * inside it scored into the cache. */
  private trunkRow(t: Trunk, units: readonly Unit[], seqs: number[][], matches: Match[]): ScoreRow {
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
      ...(t.from > 0 ? { cached: this.cache!.pieces(matches[rep]!, t.from) } : {}),
      cacheScores,
      topK: Math.max(0, ...t.members.map((m) => units[m]!.topK)),
      path: seqs[rep]!,
    };
  }
}
