// The pass planner on its own: rows in, passes out, no engine. Expected plans are worked
// out by hand from the packing rule (rows × longest row ≤ budget, longest first), the
// block rule, and the trunk rule (outermost shared stretches of ≥ minShared tokens).
import { describe, expect, it } from 'vitest';
import { findTrunks, plan, planTokens, planUnits, type ScoreRow } from '../src/core/planner.js';
import type { Unit } from '../src/core/units.js';

const unit = (prefix: number[], tail: number[]): Unit => ({ prefix, tail, targets: tail.map((t) => t + 100), topK: 0 });

const units: Unit[] = [
  unit([1, 2, 3, 4], [5]), // 0
  unit([1, 2, 3, 4], [7, 8]), // 1
  unit([], [1, 2, 3, 4, 5, 6]), // 2
  unit([9, 9], [1]), // 3
  unit([], [4, 4, 4]), // 4
];

describe('plan', () => {
  it('packs whole rows longest first within the budget (stable among equals)', () => {
    const p = planUnits(units, { maxBatchTokens: 8 });
    expect(p.passes.map((pass) => pass.rows.map((r) => r.unit))).toEqual([[1], [2], [0], [3, 4]]);
    expect(p.passes[0]!.rows[0]).toEqual({ unit: 1, tokens: [1, 2, 3, 4, 7, 8], startPosition: 0, scoredFrom: 4, targetFrom: 0, targetCount: 2, pastRow: 0 });
    expect(planTokens(p)).toBe(6 + 6 + 5 + 3 + 3);
  });

  it('bounds rows × longest × (longest past + longest) by the attention cells', () => {
    // Two rows of 2 tokens after a cached past of 6: one row costs 2 × 8 = 16 cells, two 32.
    const row = (unit: number, startPosition: number): ScoreRow => ({
      unit,
      tokens: [1, 2],
      startPosition,
      scoredFrom: 0,
      targetFrom: 0,
      targetCount: 2,
      pastRow: 0,
      cached: [{ handle: 1, offset: 0, count: startPosition }],
    });
    expect(plan([row(0, 6), row(1, 6)], { maxBatchTokens: 100, maxAttentionCells: 31 }).passes.length).toBe(2);
    expect(plan([row(0, 6), row(1, 6)], { maxBatchTokens: 100, maxAttentionCells: 32 }).passes.length).toBe(1);
  });

  it('puts rows of different past lengths in one pass, unless padding their pasts to the longest would more than double them', () => {
    const row = (unit: number, startPosition: number): ScoreRow => ({
      unit,
      tokens: [1],
      startPosition,
      scoredFrom: 0,
      targetFrom: 0,
      targetCount: 1,
      pastRow: 0,
      cached: [{ handle: unit + 1, offset: 0, count: startPosition }],
    });
    const passes = (rows: ScoreRow[]) => plan(rows, { maxBatchTokens: 100 }).passes.map((p) => p.rows.map((r) => r.unit));
    // Pasts 30 and 20: padded 2 × 30 = 60 ≤ 2 × 50.
    expect(passes([row(0, 20), row(1, 30)])).toEqual([[1, 0]]);
    // Pasts 100, 10, 10, 10: 2 × 100 ≤ 2 × 110, but 3 × 100 > 2 × 120; the rest share.
    expect(passes([row(0, 10), row(1, 100), row(2, 10), row(3, 10)])).toEqual([[1, 0], [2, 3]]);
    // The laid-out past bound (rows × longest past), not for one-token rows (decode steps).
    const two = (unit: number) => ({ ...row(unit, 10), tokens: [1, 2], targetCount: 2 });
    const bounded = (rows: ScoreRow[]) => plan(rows, { maxBatchTokens: 100, maxPastSlots: 25 }).passes.map((p) => p.rows.length);
    expect(bounded([two(0), two(1), two(2)])).toEqual([2, 1]);
    expect(bounded([row(0, 10), row(1, 10), row(2, 10)])).toEqual([3]);
    // The token budget still splits rows of one past.
    expect(plan([row(0, 5), row(1, 5), row(2, 5)], { maxBatchTokens: 2 }).passes.map((p) => p.rows.length)).toEqual([2, 1]);
  });

  it('counts a past that rows share once against the laid-out past bound (the graph gathers it per row)', () => {
    // Six continuations of each of two 400-token contexts, 30 tokens each.
    const cont = (unit: number, context: number): ScoreRow => ({
      unit,
      tokens: Array.from({ length: 30 }, (_, i) => i + 3),
      startPosition: 400,
      scoredFrom: 0,
      targetFrom: 0,
      targetCount: 30,
      pastRow: 0,
      cached: [{ handle: 100 + context, offset: 0, count: 400 }],
    });
    const rows = Array.from({ length: 12 }, (_, u) => cont(u, u % 2));
    const sizes = (maxPastSlots: number) => plan(rows, { maxBatchTokens: 512, maxPastSlots }).passes.map((p) => p.rows.length);
    // Both contexts fit 800 slots: the token budget alone splits (17 rows of 30 ≤ 512).
    expect(sizes(800)).toEqual([12]);
    // One context's 400 slots: a pass per context, each with its six continuations.
    expect(sizes(400)).toEqual([6, 6]);
    expect(plan(rows, { maxBatchTokens: 512, maxPastSlots: 400 }).passes.map((p) => new Set(p.rows.map((r) => r.cached![0]!.handle)).size)).toEqual([1, 1]);
  });

  it('runs a row longer than the budget in query blocks, each continuing the one before', () => {
    // Prefix [1, 2, 3], tail [4 … 10]: positions 3..9 are scored (7 targets); budget 4.
    const long = unit([1, 2, 3], [4, 5, 6, 7, 8, 9, 10]);
    const p = planUnits([long], { maxBatchTokens: 4 });
    expect(p.passes).toEqual([
      {
        kind: 'score',
        past: undefined,
        keep: true,
        rows: [{ unit: 0, tokens: [1, 2, 3, 4], startPosition: 0, scoredFrom: 3, pastRow: 0, targetFrom: 0, targetCount: 1, sequenceLength: 10 }],
      },
      {
        kind: 'score',
        past: 0,
        keep: true,
        rows: [{ unit: 0, tokens: [5, 6, 7, 8], startPosition: 4, scoredFrom: 0, pastRow: 0, targetFrom: 1, targetCount: 4, sequenceLength: 10 }],
      },
      {
        kind: 'score',
        past: 1,
        keep: false,
        rows: [{ unit: 0, tokens: [9, 10], startPosition: 8, scoredFrom: 0, pastRow: 0, targetFrom: 5, targetCount: 2 }],
      },
    ]);
    expect(planTokens(p)).toBe(10);
  });

  it('gives the first block of a long row its cached past, and splits trunk scores by block', () => {
    const trunk: ScoreRow = {
      tokens: [5, 6, 7, 8, 9],
      startPosition: 4,
      scoredFrom: 0,
      targetFrom: 0,
      targetCount: 0,
      pastRow: 0,
      cached: [{ handle: 3, offset: 0, count: 4 }],
      cacheScores: [
        { index: 1, target: 7 },
        { index: 4, target: 10 },
        { index: 4, target: 11 },
      ],
      path: [1, 2, 3, 4, 5, 6, 7, 8, 9],
    };
    const p = plan([trunk], { maxBatchTokens: 3 });
    expect(p.passes.map((x) => [x.past, x.rows[0]!.startPosition, x.rows[0]!.cached, x.rows[0]!.cacheScores])).toEqual([
      [undefined, 4, [{ handle: 3, offset: 0, count: 4 }], [{ index: 1, target: 7 }]],
      [
        0,
        7,
        undefined,
        [
          { index: 1, target: 10 },
          { index: 1, target: 11 },
        ],
      ],
    ]);
  });

  it('shrinks blocks as their keys grow so that block × keys stays within the attention cells', () => {
    // 12 cells: b × (keys + b) ≤ 12 gives blocks of 3 (0 keys before), 2 (3), then 1s.
    const p = planUnits([unit([], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])], { maxBatchTokens: 100, maxAttentionCells: 12 });
    const sizes = p.passes.map((x) => x.rows[0]!.tokens.length);
    expect(sizes).toEqual([3, 2, 1, 1, 1, 1, 1]);
    let keys = 0;
    for (const size of sizes) {
      expect(size * (keys + size)).toBeLessThanOrEqual(12);
      keys += size;
    }
    // Targets still add up: each block scores its own positions, in order.
    expect(p.passes.map((x) => x.rows[0]!.targetFrom)).toEqual([0, 3, 5, 6, 7, 8, 9]);
  });
});

describe('plan with probe units', () => {
  // A probe unit of 5 tokens (chunks [0, 0, 1, 1, 1], the last chunk the query), scoring
  // its last two targets; and a raw probe, which runs whole in a pass of its own.
  const probeUnit = (raw = false): Unit => ({
    prefix: [],
    tail: [1, 2, 3, 4, 5],
    targets: [104, 105],
    scored: [2, 3],
    topK: 0,
    probe: {
      keyBins: [0, 0, 1, 1, 1],
      chunks: 2,
      queryWeights: [0, 0, 1, 1, 1],
      heatmap: true,
      ...(raw ? { raw: { layers: [0], heads: [0], queries: [4] } } : {}),
    },
  });

  it('packs probe rows and score rows into the same passes, by the one packing rule', () => {
    const p = planUnits([unit([1, 2], [3]), probeUnit(), unit([], [7, 8])], { maxBatchTokens: 16 });
    expect(p.passes).toHaveLength(1);
    expect(p.passes[0]!.kind).toBe('probe');
    expect(p.passes[0]!.rows.map((r) => [r.unit, r.probe ?? false])).toEqual([
      [1, true],
      [0, false],
      [2, false],
    ]);
    // The probe row covers every tail position; which are scored is the unit's to say.
    expect(p.passes[0]!.rows[0]).toMatchObject({ tokens: [1, 2, 3, 4, 5], scoredFrom: 0, targetFrom: 0, targetCount: 5 });
    expect(planUnits([unit([1, 2], [3])], { maxBatchTokens: 16 }).passes[0]!.kind).toBe('score');
  });

  it('runs a long probe row in query blocks by the same block formula as a score row', () => {
    const blocksOf = (u: Unit) => planUnits([u], { maxBatchTokens: 2 }).passes.map((pass) => [pass.kind, pass.rows[0]!.startPosition, pass.rows[0]!.tokens.length]);
    const probe = probeUnit();
    const { probe: _ask, scored: _scored, ...plain } = probe;
    const score = { ...plain, targets: probe.tail.map((t) => t + 100) };
    expect(blocksOf(probe)).toEqual(blocksOf(score).map(([, start, n]) => ['probe', start, n]));
    expect(blocksOf(probe)).toEqual([['probe', 0, 2], ['probe', 2, 2], ['probe', 4, 1]]);
  });

  it('gives a raw probe a pass of its own, whole, whatever the budget', () => {
    const p = planUnits([unit([1], [2]), probeUnit(true), unit([3], [4])], { maxBatchTokens: 2 });
    const raw = p.passes.filter((pass) => pass.rows.some((r) => r.unit === 1));
    expect(raw).toHaveLength(1);
    expect(raw[0]!.rows).toHaveLength(1);
    expect(raw[0]!.rows[0]!.tokens).toHaveLength(5);
  });
});

describe('findTrunks', () => {
  // Three demos-then-sample sequences, two of which share a sample, and a stranger.
  const demos = [1, 2, 3, 4, 5, 6];
  const seqs = [
    [...demos, 10, 11, 12, 13, 20],
    [...demos, 10, 11, 12, 13, 21],
    [...demos, 30, 31],
    [9, 9, 9, 9, 9, 9, 9, 9],
  ];

  it('finds the outermost shared stretch, run on along the two that share the most', () => {
    // All three share the demos (6); 0 and 1 share 10: one trunk [0, 10) along them, which
    // 2 follows up to 6 and 0 and 1 up to 10 (the spine is the second of the pair).
    expect(findTrunks(seqs, [0, 0, 0, 0], 4)).toEqual([{ members: [0, 1, 2], from: 0, to: 10, spine: 1, reach: [10, 10, 6] }]);
    // With the demos cached, the two sequences of one sample still share [6, 10).
    expect(findTrunks(seqs, [6, 6, 6, 0], 4)).toEqual([{ members: [0, 1], from: 6, to: 10, spine: 1, reach: [10, 10] }]);
    expect(findTrunks(seqs, [10, 10, 6, 0], 4)).toEqual([]);
  });

  it('skips a stretch shorter than minShared but still finds longer ones below it', () => {
    // 6 shared tokens < 7: the outer group is skipped; its subgroup shares 10.
    expect(findTrunks(seqs, [0, 0, 0, 0], 7)).toEqual([{ members: [0, 1], from: 0, to: 10, spine: 1, reach: [10, 10] }]);
  });

  it('starts a trunk where its earliest member needs it, and leaves done sequences out', () => {
    expect(findTrunks(seqs, [2, 4, 6, 0], 1)).toEqual([{ members: [0, 1, 2], from: 2, to: 10, spine: 1, reach: [10, 10, 6] }]);
    // 0 and 3 are done (start = length); 1 and 2 still share [4, 6).
    expect(findTrunks(seqs, [11, 4, 6, 8], 1)).toEqual([{ members: [1, 2], from: 4, to: 6, spine: 2, reach: [6, 6] }]);
    // A sequence that is a prefix of another shares all of itself.
    expect(findTrunks([[1, 2, 3], [1, 2, 3, 4]], [0, 0], 1)).toEqual([{ members: [0, 1], from: 0, to: 3, spine: 1, reach: [3, 3] }]);
  });

  it('a sample and its one-chunk variants: one trunk along the sample, the variants off it', () => {
    const base = [1, 1, 2, 2, 3, 3, 4, 4];
    const variants = [base, [1, 1, 3, 3, 4, 4], [1, 1, 2, 2, 4, 4], [1, 1, 2, 2, 3, 3], base.slice(0, 6)];
    const [t] = findTrunks(variants, [0, 0, 0, 0, 0], 2);
    expect(t!.to).toBe(6);
    expect(t!.from).toBe(0);
    // Every member's reach is where it leaves the spine.
    t!.members.forEach((m, j) => {
      const v = variants[m]!;
      const spine = variants[t!.spine]!;
      let lcp = 0;
      while (lcp < Math.min(v.length, spine.length, t!.to) && v[lcp] === spine[lcp]) lcp++;
      expect(t!.reach[j]).toBe(lcp);
    });
  });
});
